package cli

import (
	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "the whole mesh at a glance, saying no more than is known",
		Description: `Per node: when it was last heard, the declaration sent and the one applied,
whether the mesh has changes it has not pushed (a node that holds an older
intermediate than the one that signs now is pending until a push hands it the
new chain: told, not a failure), the resources that failed and
why, holds, the host version and protocol. Host versions are grouped by
equality: no version is called older or newer. A node that reports applying
a declaration above the last sent to it is named (far above, its state is
"not believed"). At most 5 failures are listed per node (mesh node show lists
them all). The all-clear line is printed only when every node is heard,
applied the latest, has nothing pending, no failure and no hold; otherwise
each thing in the way is listed.

Exit status: 0 with the all-clear, 1 without it.

Example:
   mesh status
   mesh status --json | jq '.problems'`,
		Flags: []cli.Flag{dirFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			res, err := callCmd(c, spec.Status, spec.StatusRequest{})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				if err := printJSON(c.App.Writer, res); err != nil {
					return err
				}
			} else if err := printStatus(c.App.Writer, res); err != nil {
				return err
			}
			if !res.AllClear {
				return errNotClear
			}
			return nil
		},
	}
}

// errNotClear is status's non-zero exit without a second message: the
// problems were printed.
var errNotClear = quietError{"the mesh is not all clear"}

type quietError struct{ msg string }

func (e quietError) Error() string { return e.msg }
