package cli

import (
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
next connection is refused), the declarations the bus kept for it are purged,
and it leaves the store and the lists. The roster without it is sent at once,
so its names leave every host without a push (when the mesh cannot be
composed, nothing is sent and the answer says the names stay until the next
mesh push). A
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
					res, err := callCmd(c, spec.NodeRemove, spec.NodeRemoveRequest{Name: name})
					if err != nil {
						return err
					}
					say(c.App.Writer, "node %s removed\n", name)
					switch {
					case res.Roster != nil:
						say(c.App.Writer, "names: roster %d sent without it, to %d node(s)\n", res.Roster.Seq, res.Roster.Nodes)
					case res.NamesKept != "":
						say(c.App.Writer, "names: %s\n", res.NamesKept)
					}
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
					res, err := callCmd(c, spec.NodeShow, spec.NodeShowRequest{Name: name})
					if err != nil {
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
	return allNodes(op)
}

// allNodes is listNodes over op.
func allNodes(op *Operator) ([]spec.Node, error) {
	nodes := []spec.Node{}
	req := spec.NodeListRequest{}
	for {
		res, err := call(op, spec.NodeList, req)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, res.Nodes...)
		if res.Next == "" || res.Next <= req.After {
			return nodes, nil
		}
		req.After = res.Next
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
				req := spec.HoldRequest{Node: c.Args().First(), Hold: hold, Reason: c.String("reason")}
				if _, err := callCmd(c, spec.NodeHold, req); err != nil {
					return err
				}
				if hold {
					say(c.App.Writer, "node %s held: pushes send it nothing until mesh node release %s\n", req.Node, req.Node)
				} else {
					say(c.App.Writer, "node %s released: the next push sends it its declaration\n", req.Node)
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
