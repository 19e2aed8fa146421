package cli

import (
	"net"
	"slices"
	"strconv"

	"github.com/mesh-fleet/mesh/daemon"
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
