package host

import (
	"net/netip"

	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
)

// Names is where the host hands the mesh's names: the machine's resolver.
type Names interface {
	SetZone(resolver.Zone)
	// Attach serves addr too (the container network's gateway, port 53),
	// answering queries from allow.
	Attach(addr string, allow netip.Prefix) error
	// Detach stops serving addr and answering the prefixes only its Attach
	// allowed (the container network is gone); an address not attached is
	// no error.
	Detach(addr string) error
}

// zoneOf is the roster as the resolver answers it: NODE.internal for each
// node, ROUTE.NODE.internal and each public name for each route, each to
// the address of the node serving it. Nothing else: no aliases.
func zoneOf(r spec.Roster) resolver.Zone {
	z := resolver.Zone{Names: map[string][]netip.Addr{}}
	add := func(name, address string) {
		a, err := netip.ParseAddr(address)
		if err != nil {
			return // an address that does not parse answers nothing
		}
		for _, have := range z.Names[name] {
			if have == a {
				return
			}
		}
		z.Names[name] = append(z.Names[name], a)
	}
	for _, n := range r.Nodes {
		add(spec.NodeName(n.Name), n.Address)
	}
	for _, rt := range r.Routes {
		add(rt.Name, rt.Address)
	}
	return z
}
