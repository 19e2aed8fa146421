package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

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
			res, err := callCmd(c, spec.Audit, spec.AuditRequest{Since: time.Now().Add(-c.Duration("since")), Limit: c.Int("limit")})
			if err != nil {
				return err
			}
			if res.More {
				defer say(c.App.ErrWriter, "more entries than one answer carries: narrow --since or --limit to see the rest\n")
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, res.Entries)
			}
			return printAudit(c.App.Writer, res.Entries)
		},
	}
}

func printAudit(w io.Writer, entries []spec.AuditEntry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tOPERATOR\tVERB\tOUTCOME\tARGUMENTS")
	for _, e := range entries {
		say(tw, "%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.DateTime), e.Operator, e.Verb, e.Outcome, e.Args)
	}
	return tw.Flush()
}
