package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
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
whether the mesh has changes it has not pushed, the resources that failed and
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
			var res spec.StatusResult
			if err := callCmd(c, spec.VerbStatus, spec.StatusRequest{}, &res); err != nil {
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

func printStatus(w io.Writer, res spec.StatusResult) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHEARD\tEVERY\tSENT\tAPPLIED\tSTATE\tPENDING\tFAILED\tHOLD\tVERSION\tPROTOCOL")
	for _, n := range res.Nodes {
		pending := "no"
		if n.Pending {
			pending = "yes"
			if n.PendingWhy != "" {
				pending = "does not compose"
			}
		}
		hold := "-"
		if n.Held {
			hold = "held"
		}
		proto := "-"
		if n.LastHeard != nil {
			proto = strconv.Itoa(n.Protocol)
			if !n.ProtocolKnown {
				proto += " (not spoken here)"
			}
		}
		heard := n.Heard
		if n.Silent {
			heard += " (silent)"
		}
		state := n.State
		if n.Refused != "" {
			state += ", refused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", n.Node, heard, every(n.HeartbeatMS), n.SentSeq, n.AppliedSeq, state, pending,
			len(n.Failures), hold, shortVersion(n.HostVersion), proto)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range res.Nodes {
		for _, f := range n.Failures {
			fmt.Fprintf(w, "  ! %s %s\n", n.Node, f)
		}
		for _, note := range n.Notes {
			fmt.Fprintf(w, "  ~ %s %s\n", n.Node, note)
		}
	}
	if len(res.Versions) > 1 {
		versions := make([]string, 0, len(res.Versions))
		for v := range res.Versions {
			versions = append(versions, v)
		}
		sort.Strings(versions)
		fmt.Fprintf(w, "host versions differ (%d): ", len(versions))
		var parts []string
		for _, v := range versions {
			parts = append(parts, shortVersion(v)+" on "+strings.Join(res.Versions[v], ", "))
		}
		fmt.Fprintln(w, strings.Join(parts, "; "))
	}
	if res.AllClear {
		fmt.Fprintf(w, "all clear: %d node(s) heard, current, nothing pending, no failure, no hold\n", len(res.Nodes))
		return nil
	}
	fmt.Fprintln(w, "not all clear:")
	for _, p := range res.Problems {
		fmt.Fprintf(w, "  - %s\n", p)
	}
	return nil
}

func auditCommand() *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "who did what, when: every operator API call, secrets redacted",
		Description: `Example:
   mesh audit --since 1h
   mesh audit --json | jq '.[] | select(.verb == "push")'`,
		Flags: []cli.Flag{dirFlag(), jsonFlag(),
			&cli.DurationFlag{Name: "since", Value: 24 * time.Hour, Usage: "how far back"},
			&cli.IntFlag{Name: "limit", Value: 1000, Usage: "at most this many entries"}},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			var res spec.AuditResult
			if err := callCmd(c, spec.VerbAudit, spec.AuditRequest{Since: time.Now().Add(-c.Duration("since")), Limit: c.Int("limit")}, &res); err != nil {
				return err
			}
			if res.More {
				defer fmt.Fprintf(c.App.ErrWriter, "more entries than one answer carries: narrow --since or --limit to see the rest\n")
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, res.Entries)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tOPERATOR\tVERB\tOUTCOME\tARGUMENTS")
			for _, e := range res.Entries {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.DateTime), e.Operator, e.Verb, e.Outcome, e.Args)
			}
			return tw.Flush()
		},
	}
}

func holdCommands() []*cli.Command {
	mk := func(name string, hold bool, usage, example string) *cli.Command {
		flags := []cli.Flag{dirFlag()}
		if hold {
			flags = append(flags, &cli.StringFlag{Name: "reason", Usage: "why, shown wherever the hold is"})
		}
		return &cli.Command{
			Name: name, Usage: usage, ArgsUsage: "NODE", Flags: flags,
			Description: "Example:\n   " + example,
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 1, "one argument, the node's name"); err != nil {
					return err
				}
				var res spec.Empty
				req := spec.HoldRequest{Node: c.Args().First(), Hold: hold, Reason: c.String("reason")}
				if err := callCmd(c, spec.VerbHold, req, &res); err != nil {
					return err
				}
				if hold {
					fmt.Fprintf(c.App.Writer, "node %s held: pushes send it nothing until mesh node release %s\n", req.Node, req.Node)
				} else {
					fmt.Fprintf(c.App.Writer, "node %s released: the next push sends it its declaration\n", req.Node)
				}
				return nil
			},
		}
	}
	return []*cli.Command{
		mk("hold", true, "hold a node: pushes send it nothing, and status shows the hold", `mesh node hold --reason "disk replacement" beta`),
		mk("release", false, "release a held node", "mesh node release beta"),
	}
}
