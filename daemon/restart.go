package daemon

import (
	"context"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/statedir"
)

// FollowBus points the controller machine's own host at the bus where it
// now listens (a --bus that moved the port would leave it dialling the old
// one).
func FollowBus(dir, bus string) error {
	hostPath := statedir.Host(dir)
	st, _, err := host.ReadState(hostPath)
	if err != nil {
		return err
	}
	url := "nats://" + Dialable(bus)
	if len(st.Bus) == 1 && st.Bus[0] == url {
		return nil
	}
	st.Bus = []string{url}
	return host.WriteState(hostPath, st)
}

// CheckSubnetMove refuses to move the node's container network to cfg's
// subnet while containers are attached to it, before anything is written.
func CheckSubnetMove(ctx context.Context, dir string, cfg host.Config) error {
	if cfg.Docker == nil {
		return nil
	}
	st, _, err := host.ReadState(statedir.Host(dir))
	if err != nil {
		return err
	}
	return cfg.Docker.CheckSubnet(ctx, st.Node, cfg.Subnet)
}
