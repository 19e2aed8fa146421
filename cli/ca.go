package cli

import (
	"fmt"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func caCommand() *cli.Command {
	return &cli.Command{
		Name:  "ca",
		Usage: "the mesh's certificate authority",
		Subcommands: []*cli.Command{{
			Name:  "roots",
			Usage: "print the mesh's root certificate (PEM) and its pin",
			Description: `The root every certificate of the mesh chains to, as /roots.pem serves it;
the pin (sha256 of the certificate) is what join tokens carry. The PEM goes
to standard output, the pin to standard error, so the output can be piped.

Example:
   mesh ca roots > mesh-root.pem && openssl x509 -noout -subject -in mesh-root.pem`,
			Flags: []cli.Flag{dirFlag(), jsonFlag()},
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 0, "no arguments"); err != nil {
					return err
				}
				var res spec.CARootsResult
				if err := callCmd(c, spec.VerbCARoots, spec.CARootsRequest{}, &res); err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, res)
				}
				fmt.Fprint(c.App.Writer, res.PEM)
				for _, p := range res.Pins {
					fmt.Fprintf(c.App.ErrWriter, "pin %s\n", p)
				}
				return nil
			},
		}},
	}
}
