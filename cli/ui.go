package cli

import (
	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func uiCommand() *cli.Command {
	return &cli.Command{
		Name:  "ui",
		Usage: "print a link that signs a browser in to the status page",
		Description: `The controller's HTTP listener serves the status page at /: the fleet's
verdict (as mesh status), its nodes, each node, the modules, the pushes
and rolls. On a loopback address it is open and this prints its address.
On any other address the listener serves TLS with a mesh certificate for
its addresses and NODE.internal (mesh ca roots prints the root to trust),
and the page needs a session:
the link this prints signs one browser in, once, within 5 minutes, for
12 hours. Sessions are kept in the controller's memory: its restart
signs every browser out.

Example:
   mesh ui
   mesh ui --host ctl.example.net`,
		Flags: []cli.Flag{dirFlag(), jsonFlag(),
			&cli.StringFlag{Name: "host", Usage: "the machine's name or address the link carries (default: the listener's, or the machine's first when it listens on all)"}},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			res, err := callCmd(c, spec.UILogin, spec.UILoginRequest{Host: c.String("host")})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c.App.Writer, res)
			}
			if res.Open {
				say(c.App.Writer, "the status page is open on loopback: %s\n", res.URL)
				return nil
			}
			say(c.App.Writer, "%s\n", res.URL)
			say(c.App.ErrWriter, "this link signs one browser in, once, until %s\n", res.Expires.Local().Format("15:04:05"))
			return nil
		},
		Subcommands: []*cli.Command{
			{
				Name:  "token",
				Usage: "print a new bearer token for /metrics off loopback (it replaces the one before)",
				Description: `Off loopback /metrics needs a bearer token: give it to Prometheus as
authorization: { credentials: TOKEN } (type Bearer). The controller keeps
only its SHA-256, across restarts; a new token replaces the old one.

Example:
   mesh ui token --metrics`,
				Flags: []cli.Flag{dirFlag(), &cli.BoolFlag{Name: "metrics", Usage: "the token of /metrics (the only kind)"}},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 0, "no arguments"); err != nil {
						return err
					}
					if !c.Bool("metrics") {
						return usagef("say which token: --metrics")
					}
					res, err := callCmd(c, spec.UIToken, spec.UITokenRequest{Metrics: true})
					if err != nil {
						return err
					}
					say(c.App.Writer, "%s\n", res.Token)
					if res.Open {
						say(c.App.ErrWriter, "the listener is on loopback: /metrics needs no token there\n")
					}
					return nil
				},
			},
		},
	}
}
