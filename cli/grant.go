package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func grantCommand() *cli.Command {
	return &cli.Command{
		Name:  "grant",
		Usage: "the credentials the controller mints for the consumers of grants",
		Subcommands: []*cli.Command{{
			Name:  "list",
			Usage: "list each consumer's grant: its provider, when its credential was minted (never the value)",
			Description: `One row a consumer (MODULE-NODE) of a grant: the node whose module provides
it, the grant, and when its credential was minted. A provider unassigned with
--force leaves its consumers orphaned: they keep their last credential.

Example:
   mesh grant list`,
			Flags: []cli.Flag{dirFlag(), jsonFlag()},
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 0, "no arguments"); err != nil {
					return err
				}
				res, err := callCmd(c, spec.GrantList, spec.GrantListRequest{})
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, res)
				}
				return printGrants(c.App.Writer, res)
			},
		}, {
			Name:      "rotate",
			Usage:     "mint new credentials for the grants a module consumes on a node",
			ArgsUsage: "MODULE NODE",
			Description: `The consumer's credentials are replaced, all at once; the next push of the
consumer's node and each provider's carries the new one to both sides.

Example:
   mesh grant rotate app beta && mesh push alpha beta`,
			Flags: []cli.Flag{dirFlag()},
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 2, "two arguments, the module and the node"); err != nil {
					return err
				}
				req := spec.GrantRotateRequest{Module: c.Args().Get(0), Node: c.Args().Get(1)}
				if err := spec.CheckName("module", req.Module); err != nil {
					return usageError{err.Error()}
				}
				if err := spec.CheckName("node", req.Node); err != nil {
					return usageError{err.Error()}
				}
				res, err := callCmd(c, spec.GrantRotate, req)
				if err != nil {
					return err
				}
				printRotated(c.App.Writer, req, res)
				return nil
			},
		}},
	}
}

func printGrants(w io.Writer, res spec.GrantListResult) error {
	if len(res.Grants) == 0 {
		fmt.Fprintln(w, "no grant minted: a module that consumes one mints it when assigned")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tCONSUMER\tGRANT\tMINTED")
	for _, g := range res.Grants {
		provider := g.Provider
		if g.Orphaned {
			provider += " (orphaned: it provides it no more)"
		}
		say(tw, "%s\t%s\t%s\t%s\n", provider, g.Consumer, g.Grant, g.MintedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

func printRotated(w io.Writer, req spec.GrantRotateRequest, res spec.GrantRotateResult) {
	say(w, "%s on %s: new credential for %s; mesh push %s carries it to both sides\n",
		req.Module, req.Node, strings.Join(res.Grants, ", "), strings.Join(res.Changed, " "))
}
