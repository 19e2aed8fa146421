package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

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

Then the public names of the roster, each with the node and module serving
it and, on each edge assigned, its certificate: valid until when, the last
ACME error and when it is tried again. A name an edge has no valid
certificate for, or one expiring within a week whose renewal fails, stands
in the way of the all-clear; with no edge assigned, each is "no edge serves
it", which does not.

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

// printPublic prints the roster's public names, each with the edges
// serving it and its certificate on each; nothing when the roster has
// none.
func printPublic(w io.Writer, res spec.StatusResult) error {
	if len(res.Public) == 0 {
		return nil
	}
	fmt.Fprintln(w, "public names:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, ps := range res.Public {
		served := ps.Node + "/" + ps.Module
		if len(ps.Edges) == 0 {
			say(tw, "  %s\t%s\tno edge serves it\n", ps.Name, served)
			continue
		}
		for i, e := range ps.Edges {
			if i > 0 {
				ps.Name, served = "", ""
			}
			say(tw, "  %s\t%s\tedge %s: %s\n", ps.Name, served, e.Edge, certificateText(e, res.Time))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if res.PublicOmitted > 0 {
		say(w, "  …and %d more (mesh status --json lists those shown)\n", res.PublicOmitted)
	}
	return nil
}

// certificateText is a public name's certificate on one edge, at now.
func certificateText(e spec.PublicEdge, now time.Time) string {
	s := e.State
	switch e.State {
	case spec.EdgeValid:
		s = "valid until " + whenText(e.NotAfter, now)
	case spec.EdgeExpired:
		s = "expired at " + e.NotAfter.UTC().Format(time.RFC3339)
	}
	if e.Error != "" {
		if e.State == spec.EdgeFailed {
			s = ""
		} else {
			s += "; renewal "
		}
		s += fmt.Sprintf("failed at %s: %s; ", e.ErrorAt.UTC().Format(time.RFC3339), e.Error)
		if e.Retry.IsZero() {
			s += "not tried again until the edge restarts"
		} else {
			s += "tried again at " + whenText(e.Retry, now)
		}
	}
	return s
}

// whenText is t, and how far from now it is.
func whenText(t, now time.Time) string {
	d := t.Sub(now)
	if d < 0 {
		return t.UTC().Format(time.RFC3339) + " (" + (-d).Round(time.Second).String() + " ago)"
	}
	if d >= 48*time.Hour {
		return t.UTC().Format(time.RFC3339) + fmt.Sprintf(" (in %dd)", int(d/(24*time.Hour)))
	}
	return t.UTC().Format(time.RFC3339) + " (in " + d.Round(time.Second).String() + ")"
}
