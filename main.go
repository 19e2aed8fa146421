// Command mesh runs a fleet of your own machines: `mesh genesis` creates a
// mesh on the first one, and the other commands run and operate it. The
// commands live in package cli; this is the program's entry alone.
package main

import (
	"os"

	"github.com/mesh-fleet/mesh/cli"
)

func main() { os.Exit(cli.Main(os.Args, os.Stdout, os.Stderr)) }
