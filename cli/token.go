package cli

import (
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "make, list and revoke the tokens that let a machine join",
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "make a single-use token for the node NODE to join with",
				ArgsUsage: "NODE",
				Description: `Prints the token on standard output, alone on its line. It carries the
SHA-256 pin of the mesh's root certificate, the bus's address and a secret
whose bus credential is already in force when the token is printed. It
joins one machine, once, before it expires.

Example:
   mesh token create --ttl 30m beta
   # then, on beta:  mesh host --dir /var/lib/mesh --join TOKEN
   # or, the token written to a file (a service manager's unit):
   #                  mesh host --dir /var/lib/mesh --join-file /root/beta.token

With --controller, the token joins a controller of the mesh with its node
(the mesh runs with --cluster): it carries every controller's bus, and
the machine joins with mesh controller --join TOKEN --bus ADDR --cluster
HOST:PORT.`,
				Flags: []cli.Flag{
					dirFlag(), jsonFlag(),
					&cli.DurationFlag{Name: "ttl", Value: time.Hour, Usage: "how long the token may be used (1m to 168h)"},
					&cli.BoolFlag{Name: "controller", Usage: "a token that joins one more controller of the mesh, with its node NODE"},
				},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, "one argument, the new node's name"); err != nil {
						return err
					}
					node := c.Args().First()
					if err := spec.CheckName("node", node); err != nil {
						return usageError{err.Error()}
					}
					if ttl := c.Duration("ttl"); ttl < mesh.MinTokenTTL || ttl > mesh.MaxTokenTTL {
						return usagef("--ttl %s: a token lives from %s to %s; nothing was made", ttl, mesh.MinTokenTTL, mesh.MaxTokenTTL)
					}
					res, err := callCmd(c, spec.TokenCreate, spec.TokenCreateRequest{Node: node, TTL: c.Duration("ttl"), Controller: c.Bool("controller")})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, res)
					}
					fmt.Fprintln(c.App.Writer, res.Token)
					fmt.Fprintf(c.App.ErrWriter, "token %s for node %q, single use, expires %s (in %s)\n",
						res.ID, node, res.Expires.Format(time.RFC3339), time.Until(res.Expires).Round(time.Second))
					if c.Bool("controller") {
						fmt.Fprintf(c.App.ErrWriter, "on %s: mesh controller --dir D --join-file FILE --bus HOST:PORT --cluster HOST:PORT, the token written to FILE (or --join TOKEN)\n", node)
					} else {
						fmt.Fprintf(c.App.ErrWriter, "on %s: mesh host --dir D --join-file FILE, the token written to FILE (or --join TOKEN)\n", node)
					}
					if tok, err := spec.ParseToken(res.Token); err == nil && onlyLoopback(tok.Bus) {
						fmt.Fprintf(c.App.ErrWriter, "warning: the token carries only loopback addresses (%s): only this machine can join with it.\n"+
							"  For another machine, run the controller with --bus 0.0.0.0:PORT --advertise ADDRESS (an address it can reach), then create a token again.\n",
							strings.Join(tok.Bus, ", "))
					}
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list the open tokens (never their secrets)",
				Description: `Example:
   mesh token list
   mesh token list --all --json`,
				Flags: []cli.Flag{dirFlag(), jsonFlag(), &cli.BoolFlag{Name: "all", Usage: "also the used, revoked and expired ones"}},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 0, "no arguments"); err != nil {
						return err
					}
					res, err := callCmd(c, spec.TokenList, spec.TokenListRequest{All: c.Bool("all")})
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, res.Tokens)
					}
					return printTokens(c.App.Writer, res.Tokens, time.Now())
				},
			},
			{
				Name:      "revoke",
				Usage:     "end a token before it is used",
				ArgsUsage: "ID",
				Description: `Example:
   mesh token revoke t3f9a02c1d4`,
				Flags: []cli.Flag{dirFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, "one argument, the token's ID (mesh token list shows them)"); err != nil {
						return err
					}
					if _, err := callCmd(c, spec.TokenRevoke, spec.TokenRevokeRequest{ID: c.Args().First()}); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "token %s revoked\n", c.Args().First())
					return nil
				},
			},
		},
	}
}

// printTokens prints tokens as a table, their state as of now: what each
// enrols (a host, or a controller with its node) beside its node.
func printTokens(w io.Writer, tokens []spec.TokenInfo, now time.Time) error {
	if len(tokens) == 0 {
		fmt.Fprintln(w, "no tokens (mesh token create NODE makes one; --all lists the used, revoked and expired too)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNODE\tENROLS\tCREATED\tEXPIRES\tSTATE")
	for _, t := range tokens {
		kind := "host"
		if t.Controller {
			kind = "controller"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", shown(t.ID), shown(t.Node), kind, t.Created.Format(time.RFC3339), t.Expires.Format(time.RFC3339), tokenState(t, now))
	}
	return tw.Flush()
}

func tokenState(t spec.TokenInfo, now time.Time) string {
	switch {
	case t.Used != nil:
		return "used " + t.Used.Format(time.RFC3339)
	case t.Revoked != nil:
		return "revoked " + t.Revoked.Format(time.RFC3339)
	case !now.Before(t.Expires):
		return "expired"
	default:
		return "open"
	}
}

// onlyLoopback says whether every bus URL a token carries is on loopback.
func onlyLoopback(urls []string) bool {
	for _, u := range urls {
		host, _, err := net.SplitHostPort(strings.TrimPrefix(u, "nats://"))
		if err != nil {
			return false
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return false
		}
	}
	return len(urls) > 0
}
