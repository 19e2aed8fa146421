package cli

import (
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/urfave/cli/v2"
)

// clusterFlag is where the controllers' routes listen: a controller's
// flag, kept in D/config.yaml.
func clusterFlag() cli.Flag {
	return &cli.StringFlag{Name: "cluster", Usage: "run the bus as a server of the controllers' cluster, its routes listening on host:port (a fixed port: the other controllers dial it)"}
}

// checkClusterFlag refuses a --cluster that is not host:port with a
// fixed port, or cannot be bound.
func checkClusterFlag(c *cli.Context) error {
	addr := c.String("cluster")
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("--cluster %q: %v (want host:port)", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || host == "" {
		return usagef("--cluster %q: want a host and a fixed port from 1 to 65535 (the other controllers dial it)", addr)
	}
	_, l, err := holdPort("--cluster", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// keepCluster records --cluster in the cluster's state of the mesh in
// dir, when given or kept, and returns advertise with every peer's bus
// URL added: the addresses join tokens carry.
func keepCluster(c *cli.Context, dir string, advertise []string) ([]string, error) {
	listen := c.String("cluster")
	if listen == "" {
		return advertise, nil
	}
	op, err := statedir.ReadOperator(dir)
	if err != nil {
		return nil, err
	}
	st, err := daemon.KeepClusterListen(dir, op.Mesh, listen, advertise[0])
	if err != nil {
		return nil, err
	}
	for _, u := range st.BusURLs() {
		if !slices.Contains(advertise, u) {
			advertise = append(advertise, u)
		}
	}
	return advertise, nil
}

// clusterCommand is mesh cluster: the controllers' cluster as the
// operator sees it, and the removal of one of its controllers.
func clusterCommand() *cli.Command {
	return &cli.Command{
		Name:  "cluster",
		Usage: "the controllers' cluster: which controller is what, and removing one",
		Subcommands: []*cli.Command{
			{
				Name:  "show",
				Usage: "every controller that answers on the bus: its server, its role and whom it follows",
				Description: `Example:
   mesh cluster show
   mesh cluster show --json`,
				Flags: []cli.Flag{dirFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 0, "no arguments"); err != nil {
						return err
					}
					op, err := dialOperator(c)
					if err != nil {
						return err
					}
					defer op.Close()
					roles := op.controllerRoles()
					slices.SortFunc(roles, func(a, b spec.ControllerRole) int { return strings.Compare(a.Server, b.Server) })
					if c.Bool("json") {
						if roles == nil {
							roles = []spec.ControllerRole{}
						}
						return printJSON(c.App.Writer, roles)
					}
					return printRoles(c.App.Writer, roles)
				},
			},
			{
				Name:      "remove",
				Usage:     "remove a controller from the cluster's peer set (a machine gone for good)",
				ArgsUsage: "SERVER|NODE",
				Description: `The controller named (its server's name, c-..., as mesh cluster show
gives it, or its node's) leaves JetStream's cluster and the peer set; the
others start again without it, and a controller that joins later takes
its copies of the mesh's truth. Its node stays a host of the mesh until
mesh node remove NODE. The leader cannot remove itself (stop it; another
leads within seconds), and a cluster of two is not made one: join the
replacement after the removal.

Example:
   mesh cluster remove ctl3
   mesh token create --controller ctl4   # its replacement`,
				Flags: []cli.Flag{dirFlag()},
				Action: func(c *cli.Context) error {
					if err := wantArgs(c, 1, "one argument, the controller's server or node (mesh cluster show lists them)"); err != nil {
						return err
					}
					res, err := callCmd(c, spec.ClusterRemove, spec.ControllerRemoveRequest{Name: c.Args().First()})
					if err != nil {
						return err
					}
					say(c.App.Writer, "%s removed from the cluster; its controllers now: %s\n", res.Server, strings.Join(res.Peers, ", "))
					if res.Node != "" {
						say(c.App.Writer, "its node %s stays a host of the mesh: mesh node remove %s forgets it\n", res.Node, res.Node)
					}
					return nil
				},
			},
		},
	}
}

// printRoles prints the controllers' roles as a table.
func printRoles(w io.Writer, roles []spec.ControllerRole) error {
	if len(roles) == 0 {
		fmt.Fprintln(w, "no controller of a cluster answers: a controller alone (no --cluster) answers none, nor does a cluster whose controllers are down")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tROLE\tLEADER\tPEERS")
	for _, r := range roles {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", shown(r.Server), shown(r.Role), orDash(shown(r.Leader)), r.Peers)
	}
	return tw.Flush()
}
