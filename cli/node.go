package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func nodeCommand() *cli.Command {
	return &cli.Command{
		Name:  "node",
		Usage: "list, show, hold, release and remove the mesh's nodes",
		Subcommands: append(holdCommands(), []*cli.Command{
			{
				Name:      "remove",
				Usage:     "remove a node: its credential stops working at once",
				ArgsUsage: "NODE",
				Description: `The node's bus credential is withdrawn (its connections are closed and its
next connection is refused), the declarations the bus kept for it are purged
and its delivery consumer deleted, and it leaves the store and the lists. A
removal that failed half-way is finished by running it again. The removed
machine's mesh host exits with code 3. To bring the machine back, make a new
token and join again (with a new --dir, or after removing D/host): it starts
from nothing until a push. The controller's own node cannot be removed.

Example:
   mesh node remove beta`,
				Flags: []cli.Flag{dirFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, "one argument, the node's name"); err != nil {
						return err
					}
					name := c.Args().First()
					if err := spec.CheckName("node", name); err != nil {
						return usageError{err.Error()}
					}
					var res spec.Empty
					if err := callCmd(c, spec.VerbNodeRemove, spec.NodeRemoveRequest{Name: name}, &res); err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "node %s removed\n", name)
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list every node: address, when it was last heard, its host version",
				Description: `Example:
   mesh node list
   mesh node list --json | jq '.[] | select(.last_heard == null) | .name'`,
				Flags: []cli.Flag{dirFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 0, "no arguments"); err != nil {
						return err
					}
					nodes, err := listNodes(c)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, nodes)
					}
					return printNodeList(c.App.Writer, nodes)
				},
			},
			{
				Name:      "show",
				Usage:     "show one node and every fact it reported",
				ArgsUsage: "NODE",
				Description: `Example:
   mesh node show alpha
   mesh node show --json alpha`,
				Flags: []cli.Flag{dirFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, "one argument, the node's name"); err != nil {
						return err
					}
					name := c.Args().First()
					if err := spec.CheckName("node", name); err != nil {
						return usageError{err.Error()}
					}
					var res spec.NodeShowResult
					if err := callCmd(c, spec.VerbNodeShow, spec.NodeShowRequest{Name: name}, &res); err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c.App.Writer, res.Node)
					}
					return printNode(c.App.Writer, res.Node)
				},
			},
		}...),
	}
}

// listNodes asks for every node, page by page: a reply holds as many as
// fit the bus's message size.
func listNodes(c *cli.Context) ([]spec.Node, error) {
	op, err := dialOperator(c)
	if err != nil {
		return nil, err
	}
	defer op.Close()
	nodes := []spec.Node{}
	req := spec.NodeListRequest{}
	for {
		var res spec.NodeListResult
		if err := op.call(spec.VerbNodeList, req, &res); err != nil {
			return nil, err
		}
		nodes = append(nodes, res.Nodes...)
		if res.Next == "" || res.Next <= req.After {
			return nodes, nil
		}
		req.After = res.Next
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func heard(n spec.Node) string {
	if n.LastHeard == nil {
		return "never"
	}
	return n.HeardAgo + " ago"
}

// every is how often a node said it sends a heartbeat, or "-" if it did
// not say (never heard, or a host older than the heartbeat's interval).
func every(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// heartbeatRow is how often a heard node sends a heartbeat, and when it is
// silent.
func heartbeatRow(n spec.Node) string {
	silent := (time.Duration(n.SilentAfterMS) * time.Millisecond).String()
	if n.HeartbeatMS <= 0 {
		return "not said (a host older than the heartbeat's interval); silent after " + silent + " unheard"
	}
	return "every " + every(n.HeartbeatMS) + "; silent after " + silent + " unheard (two missed)"
}

func shortVersion(v string) string {
	if v == "" {
		return "-"
	}
	if len(v) > 12 {
		return v[:12]
	}
	return v
}

func protocol(n spec.Node) string {
	switch {
	case n.LastHeard == nil:
		return "-"
	case n.ProtocolKnown:
		return strconv.Itoa(n.Protocol)
	default:
		return fmt.Sprintf("%d (not spoken by this controller, which speaks %d)", n.Protocol, spec.Protocol)
	}
}

func printNodeList(w io.Writer, nodes []spec.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tADDRESS\tHEARD\tEVERY\tVERSION\tPROTOCOL\tARCH\tOS")
	for _, n := range nodes {
		arch, osName := "-", "-"
		if n.Facts != nil {
			arch, osName = n.Facts.Arch, n.Facts.Distro+" "+n.Facts.DistroVer
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, n.Address, heard(n), every(n.HeartbeatMS), shortVersion(n.HostVersion), protocol(n), arch, strings.TrimSpace(osName))
	}
	return tw.Flush()
}

func printNode(w io.Writer, n spec.Node) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("node", n.Name)
	row("address", n.Address)
	row("joined", n.Joined.Format(time.RFC3339))
	if n.LastHeard == nil {
		row("heard", "never: this node has not sent a heartbeat")
	} else {
		row("heard", fmt.Sprintf("%s (%s)", heard(n), n.LastHeard.Format(time.RFC3339)))
		row("heartbeat", heartbeatRow(n))
	}
	row("host version", orDash(n.HostVersion))
	row("protocol", protocol(n))
	row("sent sequence", strconv.FormatUint(n.SentSeq, 10))
	row("applied sequence", strconv.FormatUint(n.AppliedSeq, 10))
	if r := n.LastReport; r == nil {
		row("last report", "none")
	} else {
		row("last report", reportSummary(*r))
		for _, res := range r.Results {
			switch {
			case res.Outcome == spec.Failed:
				row("  failed", res.Name+": "+res.Error)
			case res.Note != "":
				row("  "+res.Outcome, res.Name+": "+res.Note)
			}
		}
		if r.Omitted > 0 {
			row("  not kept", fmt.Sprintf("%d more result(s): the node sent a report larger than the controller keeps", r.Omitted))
		}
	}
	if f := n.Facts; f == nil {
		row("facts", "none reported yet")
	} else {
		row("facts reported", f.Time.Format(time.RFC3339))
		row("hostname", orDash(f.Hostname))
		row("architecture", orDash(f.Arch))
		row("os", orDash(f.OS))
		row("kernel", orDash(f.Kernel))
		row("distribution", orDash(strings.TrimSpace(f.Distro+" "+f.DistroVer)))
		row("cpu", orDash(f.CPUModel))
		row("cores", strconv.Itoa(f.Cores))
		row("memory", bytesIEC(f.MemoryBytes))
		row("disk", fmt.Sprintf("%s (%s free)", bytesIEC(f.DiskBytes), bytesIEC(f.DiskFree)))
		row("machine", orDash(f.Virtual))
		row("uptime", (time.Duration(f.UptimeSecond) * time.Second).String())
		row("capabilities", orDash(strings.Join(f.Capabilities, ", ")))
		if f.Engine != "" {
			row("container engine", f.Engine)
			row("container subnet", orDash(f.Subnet))
		}
		for _, e := range f.Errors {
			row("unreadable", e)
		}
	}
	return tw.Flush()
}

// reportSummary is a report in one line.
func reportSummary(r spec.Report) string {
	when := r.Time.Format(time.RFC3339)
	if r.Refused != "" {
		return fmt.Sprintf("refused declaration %d at %s: %s", r.Seq, when, r.Refused)
	}
	counts := map[string]int{}
	for _, res := range r.Results {
		counts[res.Outcome]++
	}
	kind := "applied"
	if r.Reconcile {
		kind = "reconcile corrected"
	}
	return fmt.Sprintf("%s declaration %d at %s: %d created, %d changed, %d removed, %d unchanged, %d failed, %d writes",
		kind, r.Seq, when, counts[spec.Created], counts[spec.Changed], counts[spec.Removed], counts[spec.Unchanged], counts[spec.Failed], r.Writes)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func bytesIEC(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
