package host

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/mesh-fleet/mesh/spec"
)

// Gateway is the address of a subnet's gateway: its first host address,
// where the host's resolver listens for the containers.
func Gateway(subnet netip.Prefix) netip.Addr { return subnet.Masked().Addr().Next() }

func init() {
	registerKind(hostKind{name: spec.KindNetwork, applier: func(s *Services) Applier {
		return networkApplier{docker: s.Docker, node: s.Node, subnet: s.Subnet, names: s.Names}
	}})
}

// networkApplier holds the node's own bridge network, mesh-<node>, on the
// host's subnet. Once the network is there, the host's resolver listens on
// its gateway; once it is removed, no more.
type networkApplier struct {
	docker *Docker
	node   string
	subnet netip.Prefix
	// names is the machine's resolver, which serves the gateway's port 53
	// to the subnet; nil: names are not served to containers (tests of the
	// engine alone).
	names Names
}

// gatewayAddr is where the resolver serves a network's gateway.
func gatewayAddr(gateway netip.Addr) string { return netip.AddrPortFrom(gateway, 53).String() }

// Plan says whether the network would be made or remade.
func (n networkApplier) Plan(ctx context.Context, r spec.Resource) (Result, error) {
	outcome, _, err := n.read(ctx, r)
	return Result{Outcome: outcome}, err
}

// read inspects the network: Unchanged when it is there on the host's
// subnet, Created when it is not there, Changed when its subnet differs.
// A network of that name that is not this node's is an error.
func (n networkApplier) read(ctx context.Context, r spec.Resource) (string, network.Inspect, error) {
	if n.docker == nil {
		return "", network.Inspect{}, errNoEngine
	}
	ns, ok := spec.As[*spec.NetworkSpec](r)
	if !ok || ns == nil {
		return "", network.Inspect{}, fmt.Errorf("resource %q has no network spec", r.Name)
	}
	name := ns.Name
	if name != spec.NetworkName(n.node) {
		return "", network.Inspect{}, fmt.Errorf("network %s is not this node's (%s)", name, spec.NetworkName(n.node))
	}
	res, err := n.docker.cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if notFound(err) {
		return spec.Created, network.Inspect{}, nil
	}
	if err != nil {
		return "", network.Inspect{}, n.docker.wrap("inspect network "+name, err)
	}
	nw := res.Network
	if owner := nw.Labels[spec.LabelNode]; owner != n.node {
		return "", nw, fmt.Errorf("network %s exists and is not this node's (label %s=%q): remove it (docker network rm %s) or rename the node", name, spec.LabelNode, owner, name)
	}
	if !slices.ContainsFunc(nw.IPAM.Config, func(c network.IPAMConfig) bool { return c.Subnet == n.subnet.Masked() }) {
		return spec.Changed, nw, nil
	}
	return spec.Unchanged, nw, nil
}

// Apply makes the network if it is not there, remakes it on a changed
// subnet when no container is attached, and has the resolver listen on its
// gateway.
func (n networkApplier) Apply(ctx context.Context, r spec.Resource, w *Writes) (Result, error) {
	outcome, err := n.apply(ctx, r, w)
	return Result{Outcome: outcome}, err
}

func (n networkApplier) apply(ctx context.Context, r spec.Resource, w *Writes) (string, error) {
	outcome, nw, err := n.read(ctx, r)
	if err != nil {
		return "", err
	}
	name := r.Target()
	if outcome == spec.Changed {
		if len(nw.Containers) > 0 {
			var names []string
			for _, c := range nw.Containers {
				names = append(names, c.Name)
			}
			slices.Sort(names)
			return "", fmt.Errorf("network %s is on %s, not the host's subnet %s, and still has containers (%s): remove them or give --subnet %s",
				name, subnets(nw), n.subnet, strings.Join(names, ", "), subnets(nw))
		}
		w.add()
		if _, err := n.docker.cli.NetworkRemove(ctx, nw.ID, client.NetworkRemoveOptions{}); err != nil {
			return "", n.docker.wrap("remove network "+name+" to make it on "+n.subnet.String(), err)
		}
	}
	if outcome != spec.Unchanged {
		w.add()
		_, err := n.docker.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
			Driver: "bridge",
			IPAM: &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{
				Subnet: n.subnet.Masked(), Gateway: Gateway(n.subnet),
			}}},
			Labels: map[string]string{spec.LabelNode: n.node, spec.LabelResource: r.Name},
		})
		if err != nil {
			return "", n.docker.wrap(fmt.Sprintf("create network %s on %s", name, n.subnet), err)
		}
	}
	if n.names != nil {
		if err := n.names.Attach(gatewayAddr(Gateway(n.subnet)), n.subnet.Masked()); err != nil {
			return "", fmt.Errorf("serve names on network %s's gateway %s: %w", name, Gateway(n.subnet), err)
		}
	}
	return outcome, nil
}

// Remove removes the network (one already gone is removed), then has the
// resolver stop serving its gateway: the one it was made with, and the
// host's, which is what Apply attached.
func (n networkApplier) Remove(ctx context.Context, a Applied, _ []string, w *Writes) (Result, error) {
	return Result{Outcome: spec.Removed}, n.remove(ctx, a, w)
}

func (n networkApplier) remove(ctx context.Context, a Applied, w *Writes) error {
	if n.docker == nil {
		return errNoEngine
	}
	gateways := []netip.Addr{Gateway(n.subnet)}
	res, err := n.docker.cli.NetworkInspect(ctx, a.Path, client.NetworkInspectOptions{})
	switch {
	case err == nil:
		for _, c := range res.Network.IPAM.Config {
			if c.Gateway.IsValid() && !slices.Contains(gateways, c.Gateway) {
				gateways = append(gateways, c.Gateway)
			}
		}
		w.add()
		if _, err := n.docker.cli.NetworkRemove(ctx, res.Network.ID, client.NetworkRemoveOptions{}); err != nil && !notFound(err) {
			return n.docker.wrap("remove network "+a.Path, err)
		}
	case !notFound(err):
		return n.docker.wrap("inspect network "+a.Path, err)
	}
	if n.names == nil {
		return nil
	}
	for _, gw := range gateways {
		if err := n.names.Detach(gatewayAddr(gw)); err != nil {
			return fmt.Errorf("stop serving names on network %s's gateway %s: %w", a.Path, gw, err)
		}
	}
	return nil
}

func subnets(nw network.Inspect) string {
	var s []string
	for _, c := range nw.IPAM.Config {
		s = append(s, c.Subnet.String())
	}
	return strings.Join(s, ", ")
}

// CheckSubnet says whether node's network may move to subnet at this
// start: it may when the network is not there, is on subnet already, or
// has no container attached. Otherwise the move is refused, naming the
// containers, before anything changes: a network that stayed where it was
// under containers whose resolver moved would leave every name lookup
// failing.
func (d *Docker) CheckSubnet(ctx context.Context, node string, subnet netip.Prefix) error {
	name := spec.NetworkName(node)
	res, err := d.cli.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if notFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--subnet %s: cannot tell whether containers are on network %s: %w (start the engine, or keep the subnet it has)", subnet, name, d.wrap("inspect network "+name, err))
	}
	nw := res.Network
	if slices.ContainsFunc(nw.IPAM.Config, func(c network.IPAMConfig) bool { return c.Subnet == subnet.Masked() }) || len(nw.Containers) == 0 {
		return nil
	}
	var names []string
	for _, c := range nw.Containers {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	return fmt.Errorf("--subnet %s: network %s is on %s and has containers attached (%s); nothing was changed: unassign their modules and push first, or keep --subnet %s",
		subnet, name, subnets(nw), strings.Join(names, ", "), subnets(nw))
}
