package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func overlayCommand() *cli.Command {
	return &cli.Command{
		Name:  "overlay",
		Usage: "turn the mesh's private WireGuard network on or off, and show its members",
		Subcommands: []*cli.Command{
			{
				Name:      "enable",
				Usage:     "turn the overlay on with a private range: every node gets an address on it",
				ArgsUsage: "CIDR",
				Description: `Every node with a WireGuard key (each host makes one at join) is given an
address from the range, kept for the node's life, and the roster carrying
each node's key, address, endpoints and relay flag is sent at once: every
host brings up mesh0 with its peers, and every name of the mesh resolves to
overlay addresses. The range is IPv4, private (10/8, 172.16/12,
192.168/16, 100.64/10), /8 to /28. Refused while the overlay is on with
another range (mesh overlay disable first). mesh genesis --overlay CIDR
turns it on at creation.

Example:
   mesh overlay enable 10.88.0.0/16`,
				Flags: []cli.Flag{dirFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, "one argument, the overlay's range (10.88.0.0/16)"); err != nil {
						return err
					}
					cidr, err := spec.CheckOverlayCIDR(c.Args().First())
					if err != nil {
						return usagef("%v; nothing was changed", err)
					}
					res, err := callCmd(c, spec.OverlayEnable, spec.OverlayEnableRequest{CIDR: cidr.String()})
					if err != nil {
						return err
					}
					say(c.App.Writer, "overlay on: %s, %d node(s) given an address\n", res.CIDR, res.Given)
					membershipSent(c.App.Writer, res.Roster, res.NamesKept)
					return nil
				},
			},
			{
				Name:  "disable",
				Usage: "turn the overlay off: every host takes mesh0 down, names resolve to the nodes' own addresses",
				Description: `The range and every node's overlay address go; the roster without the
overlay is sent at once, and each host takes its interface, routes and
peers down.

Example:
   mesh overlay disable`,
				Flags: []cli.Flag{dirFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 0, "no arguments"); err != nil {
						return err
					}
					res, err := callCmd(c, spec.OverlayDisable, spec.OverlayDisableRequest{})
					if err != nil {
						return err
					}
					if res.Was {
						say(c.App.Writer, "overlay off\n")
					} else {
						say(c.App.Writer, "the overlay was off\n")
					}
					membershipSent(c.App.Writer, res.Roster, res.NamesKept)
					return nil
				},
			},
			{
				Name:  "show",
				Usage: "show the overlay's range and each member: address, key, endpoints, relay, mode and paths",
				Description: `Each member's peers are listed with their last handshake and whether the
path is direct or through a relay; a peer with no handshake for 3 minutes
is marked STALE (a failure in mesh status).

Example:
   mesh overlay show
   mesh overlay show --json | jq '.members[] | select(.stale) | .node'`,
				Flags: []cli.Flag{dirFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 0, "no arguments"); err != nil {
						return err
					}
					res, err := showOverlay(c)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, res)
					}
					return printOverlay(c.App.Writer, res)
				},
			},
		},
	}
}

// showOverlay asks for the overlay, page by page.
func showOverlay(c *cli.Context) (spec.OverlayShowResult, error) {
	op, err := dialOperator(c)
	if err != nil {
		return spec.OverlayShowResult{}, err
	}
	defer op.Close()
	var all spec.OverlayShowResult
	req := spec.OverlayShowRequest{}
	for {
		res, err := call(op, spec.OverlayShow, req)
		if err != nil {
			return spec.OverlayShowResult{}, err
		}
		members := append(all.Members, res.Members...)
		all = res
		all.Members, all.Next = members, ""
		if res.Next == "" || res.Next <= req.After {
			if all.Members == nil {
				all.Members = []spec.NodeOverlay{}
			}
			return all, nil
		}
		req.After = res.Next
	}
}

// membershipSent says what became of the roster a change of the overlay
// sent.
func membershipSent(w io.Writer, r *spec.PushRoster, kept string) {
	switch {
	case r != nil:
		say(w, "roster %d sent to %d node(s)\n", r.Seq, r.Nodes)
	case kept != "":
		say(w, "roster: %s\n", kept)
	default:
		say(w, "roster: unchanged, nothing sent\n")
	}
}

// printOverlay prints the overlay and its members.
func printOverlay(w io.Writer, res spec.OverlayShowResult) error {
	if res.CIDR == "" {
		say(w, "the overlay is off: mesh overlay enable CIDR turns it on\n")
		return nil
	}
	enabled := "-"
	if res.Enabled != nil {
		enabled = res.Enabled.Format(time.RFC3339)
	}
	say(w, "overlay %s, on since %s, %d member(s)\n", res.CIDR, enabled, len(res.Members))
	for _, m := range res.Members {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		row := func(k, v string) { say(tw, "%s\t%s\n", k, v) }
		say(tw, "\n")
		row("node", m.Node)
		row("key", m.Key)
		overlayRows(row, m, res.Time)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// overlayRows are a member's overlay as mesh node show and mesh overlay
// show print it: address, mode, endpoints, relay, error, and each peer's
// last handshake and path.
func overlayRows(row func(k, v string), m spec.NodeOverlay, now time.Time) {
	row("overlay address", m.IP)
	row("overlay mode", orDash(m.Mode))
	row("endpoints", orDash(strings.Join(m.Endpoints, ", ")))
	if m.Relay {
		row("relay", "yes: forwards overlay traffic between peers that cannot reach each other")
	}
	if m.Reported == nil {
		row("overlay reported", "never")
	} else {
		row("overlay reported", m.Reported.Format(time.RFC3339))
	}
	if m.Error != "" {
		row("overlay error", m.Error)
	}
	for _, p := range m.Peers {
		hs := "no handshake yet"
		if !p.Handshake.IsZero() {
			hs = "handshake " + now.Sub(p.Handshake).Round(time.Second).String() + " ago"
		}
		path := "direct"
		if p.Via != "" {
			path = "via " + p.Via
		}
		if p.Endpoint != "" {
			path += " (" + p.Endpoint + ")"
		}
		line := fmt.Sprintf("%s, %s", hs, path)
		if slices.Contains(m.Stale, p.Node) {
			line = "STALE: " + line
		}
		row("  peer "+p.Node, line)
	}
	for _, s := range m.Stale {
		if !slices.ContainsFunc(m.Peers, func(p spec.OverlayPath) bool { return p.Node == s }) {
			row("  peer "+s, "STALE: not reported")
		}
	}
}
