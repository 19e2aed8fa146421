package mesh

import (
	"context"
	"errors"
	"fmt"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// composer composes nodes from what the store holds: the modules assigned
// to them, their binaries and facts, and the CA chain.
type composer struct {
	db     Store
	ca     *ca.Authority
	sealer *sealer
	// controllers are the controllers' bus URLs every roster carries
	// (controllersOf).
	controllers []string
}

// gathered is every node composed: the plans of those that compose, the
// node-own failures of those that do not, the mesh's roster, its CA chain
// (ComposeChain), and the grants as composing read them.
type gathered struct {
	plans  map[string]Plan
	own    map[string]error
	roster spec.Roster
	chain  string
	grants grantView
}

// gather composes every node of the mesh and gathers the roster. A node
// whose own set does not compose (ErrNodeOwn) contributes the routes of the
// declaration it last received, which is what it still serves; any other
// failure is raised, naming the node and the read, and no roster is
// returned beside it (invariant 1).
func (cm *composer) gather(ctx context.Context) (gathered, error) {
	nodes, err := cm.db.Nodes(ctx)
	if err != nil {
		return gathered{}, err
	}
	modules, err := cm.modulesByName(ctx)
	if err != nil {
		return gathered{}, err
	}
	// Every node's assignments and binary in one read each, not two reads
	// a node.
	all, err := cm.db.Assignments(ctx)
	if err != nil {
		return gathered{}, err
	}
	assigned := map[string][]store.Assignment{}
	for _, a := range all {
		assigned[a.Node] = append(assigned[a.Node], a)
	}
	binaries, err := cm.db.NodeBinaries(ctx)
	if err != nil {
		return gathered{}, err
	}
	// Every grant once: a read that fails fails the push, never a
	// consumer's line or credential left out (invariant 1).
	grants, err := cm.db.Grants(ctx)
	if err != nil {
		return gathered{}, err
	}
	view := grantView{grants: grants, modules: modules, assigned: assigned}
	// The overlay's members are read with the nodes: a read that fails
	// fails the push, and no host loses a peer (invariant 1).
	overlay, err := cm.db.Overlay(ctx)
	if err != nil {
		return gathered{}, err
	}
	g := gathered{plans: map[string]Plan{}, own: map[string]error{}, roster: spec.Roster{Nodes: []spec.RosterNode{}, Routes: []spec.RosterRoute{}},
		chain: ComposeChain(cm.ca.Intermediate()), grants: view}
	onOverlay := map[string]string{} // node -> overlay address
	if overlay.On() {
		g.roster.Overlay = &spec.RosterOverlay{CIDR: overlay.CIDR}
	}
	for _, n := range nodes {
		if !n.Removing.IsZero() {
			continue // leaving the mesh: in nobody's roster, sent nothing
		}
		g.roster.Nodes = append(g.roster.Nodes, rosterNode(n, overlay.On()))
		if m := g.roster.Nodes[len(g.roster.Nodes)-1].Overlay; m != nil {
			onOverlay[n.Name] = m.IP
		}
		var bin *store.Release
		if b, ok := binaries[n.Name]; ok {
			bin = &b
		}
		plan, own, err := cm.composeWith(ctx, n, modules, assigned[n.Name], bin, view)
		if err != nil {
			return gathered{}, err
		}
		if own != nil {
			g.own[n.Name] = own
		} else {
			g.plans[n.Name] = plan
		}
		g.roster.Routes = append(g.roster.Routes, plan.Routes...)
	}
	// On the overlay, a route is reached at its node's overlay address.
	for i, rt := range g.roster.Routes {
		if ip, ok := onOverlay[rt.Node]; ok {
			g.roster.Routes[i].Address = ip
		}
	}
	g.roster.Controllers = cm.controllers
	g.roster.Sort()
	return g, nil
}

// rosterNode is n's entry in the roster: with the overlay on and n on it
// (a key and an address), its overlay address and its membership;
// otherwise the address it joined with.
func rosterNode(n store.Node, overlay bool) spec.RosterNode {
	if !overlay || n.WGKey == "" || n.OverlayIP == "" {
		return spec.RosterNode{Name: n.Name, Address: n.Address}
	}
	return spec.RosterNode{Name: n.Name, Address: n.OverlayIP, Overlay: &spec.OverlayMember{
		Key: n.WGKey, IP: n.OverlayIP, Endpoints: n.Endpoints, Relay: n.Relay}}
}

// modulesByName is every registered module, by name.
func (cm *composer) modulesByName(ctx context.Context) (map[string]spec.Module, error) {
	mods, err := cm.db.Modules(ctx)
	if err != nil {
		return nil, err
	}
	modules := map[string]spec.Module{}
	for _, m := range mods {
		modules[m.Module.Name] = m.Module
	}
	return modules, nil
}

// composeOne composes node n. A node whose own set does not compose
// (ErrNodeOwn) is returned as own, with a plan holding only the routes of
// the declaration it last received, which is what it still serves; any
// other failure is err, naming the node and the read.
func (cm *composer) composeOne(ctx context.Context, n store.Node, modules map[string]spec.Module) (plan Plan, own, err error) {
	as, err := cm.db.AssignmentsOf(ctx, n.Name)
	if err != nil {
		return Plan{}, nil, fmt.Errorf("compose node %q: %w", n.Name, err)
	}
	var bin *store.Release
	switch rel, err := cm.db.NodeBinary(ctx, n.Name); {
	case err == nil:
		bin = &rel
	case !errors.Is(err, store.ErrNotFound):
		return Plan{}, nil, fmt.Errorf("compose node %q: %w", n.Name, err)
	}
	view, err := cm.grantViewOf(ctx, n.Name, modules)
	if err != nil {
		return Plan{}, nil, err
	}
	return cm.composeWith(ctx, n, modules, as, bin, view)
}

// composeWith is composeOne with n's assignments, binary (nil: none) and
// grants read already.
func (cm *composer) composeWith(ctx context.Context, n store.Node, modules map[string]spec.Module, as []store.Assignment, bin *store.Release, view grantView) (plan Plan, own, err error) {
	in := NodeInput{Node: n.Name, Address: n.Address}
	if n.Facts != nil {
		in.Capabilities, in.Arch, in.OS = n.Facts.Capabilities, n.Facts.Arch, n.Facts.OS
	}
	if bin != nil {
		r := releaseOf(*bin)
		in.Binary, in.BinaryRetry = &r, bin.Retry
	}
	for _, a := range as {
		in.Assigned = append(in.Assigned, Assigned{Module: a.Module, Settings: a.Settings})
	}
	view.fill(&in, modules)
	plan, err = ComposeNode(in, modules)
	if err == nil {
		err = cm.sealer.seal(ctx, n, plan)
	}
	switch {
	case err == nil:
		return plan, nil, nil
	case errors.Is(err, ErrNodeOwn):
		routes, rerr := cm.servedRoutes(ctx, n.Name)
		if rerr != nil {
			return Plan{}, nil, rerr
		}
		return Plan{Routes: routes}, err, nil
	default:
		return Plan{}, nil, fmt.Errorf("compose node %q: %w", n.Name, err)
	}
}

// servedRoutes are the routes node serves by the declaration it last
// received; none if it never received one.
func (cm *composer) servedRoutes(ctx context.Context, node string) ([]spec.RosterRoute, error) {
	body, err := cm.db.LastReceived(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var d spec.Declaration
	if err := spec.Decode(body, &d); err != nil {
		return nil, fmt.Errorf("read the last declaration node %q received: %w", node, err)
	}
	if d.RosterRef == nil {
		return nil, nil
	}
	// What the node serves is what the roster in force says it serves (the
	// reference may be older: a roster change sends the node nothing when
	// its resources are as they were).
	r, err := cm.db.LastRoster(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("read the roster node %q's last declaration names (%d): no roster is recorded", node, d.RosterRef.Seq)
	}
	if err != nil {
		return nil, err
	}
	roster, err := rosterOf(r)
	if err != nil {
		return nil, err
	}
	return roster.RoutesOf(node), nil
}

// content is what one node's declaration holds, without its sequence and
// times: its resources, the reference to the roster message it was
// composed with and the CA chain.
type content struct {
	resources []spec.Resource
	ref       *spec.RosterRef // nil: none sent yet, or a preview
	chain     string
}

// contentFor is what a declaration holds of resources and of the mesh's
// roster and chain (ref is the roster message in force; nil when none is
// sent, as for a preview).
func contentFor(resources []spec.Resource, g gathered, ref *spec.RosterRef) content {
	return content{resources: resources, ref: ref, chain: g.chain}
}

// contentOf is what decl holds.
func contentOf(decl spec.Declaration) content {
	return content{resources: decl.Resources, ref: decl.RosterRef, chain: decl.CAChain}
}

// digest is contentDigest of ct, with no roster. A reference to a roster
// message is left out: the roster travels apart, so a roster change alone
// sends a node nothing (its declaration would hold what it holds).
func (ct content) digest() string {
	return contentDigest(ct.resources, spec.Roster{}, ct.chain)
}
