package mesh

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// grantView is what composing reads of grants: every credential minted,
// every registered module, and the assignments of the nodes that provide
// (by node).
type grantView struct {
	grants   []store.Grant
	modules  map[string]spec.Module
	assigned map[string][]store.Assignment
}

// providerModule is the module that provides grant on node: the first by
// name assigned there; when none is (the provider was unassigned with
// --force), the first registered one that provides it, so an orphaned
// consumer keeps the address it had.
func (v grantView) providerModule(grant, node string) (spec.Module, bool) {
	var names []string
	for _, a := range v.assigned[node] {
		names = append(names, a.Module)
	}
	sort.Strings(names)
	for _, name := range names {
		if m, ok := v.modules[name]; ok {
			if _, ok := m.Provider(grant); ok {
				return m, true
			}
		}
	}
	all := make([]string, 0, len(v.modules))
	for name := range v.modules {
		all = append(all, name)
	}
	sort.Strings(all)
	for _, name := range all {
		if _, ok := v.modules[name].Provider(grant); ok {
			return v.modules[name], true
		}
	}
	return spec.Module{}, false
}

// orphaned are the grants whose provider node has no module assigned that
// provides them (unassigned with --force): the view's assignments must be
// every node's, as the gather's are.
func (v grantView) orphaned() []store.Grant {
	var out []store.Grant
	for _, g := range v.grants {
		provides := false
		for _, a := range v.assigned[g.Provider] {
			if _, ok := v.modules[a.Module].Provider(g.Grant); ok {
				provides = true
				break
			}
		}
		if !provides {
			out = append(out, g)
		}
	}
	return out
}

// address is where a consumer reaches the provider of grant on node:
// ROUTE.NODE.internal:PORT; "" when no registered module provides it.
func (v grantView) address(grant, node string) string {
	m, ok := v.providerModule(grant, node)
	if !ok {
		return ""
	}
	p, _ := m.Provider(grant)
	for _, r := range m.Routes {
		if r.Name == p.Route {
			return spec.RouteName(r.Name, node) + ":" + strconv.Itoa(r.Port)
		}
	}
	return ""
}

// fill gives in what node consumes and provides: each assigned module's
// credentials and providers' addresses, and each grant its modules
// provide with every consumer's credential.
func (v grantView) fill(in *NodeInput, modules map[string]spec.Module) {
	for i, a := range in.Assigned {
		for _, g := range v.grants {
			if g.Module != a.Module || g.Node != in.Node {
				continue
			}
			if in.Assigned[i].Grants == nil {
				in.Assigned[i].Grants = map[string]Granted{}
			}
			in.Assigned[i].Grants[g.Grant] = Granted{Credential: g.Credential, Address: v.address(g.Grant, g.Provider)}
		}
		for _, p := range modules[a.Module].Provides {
			consumers := map[string]string{}
			for _, g := range v.grants {
				if g.Provider == in.Node && g.Grant == p.Grant {
					consumers[spec.GrantConsumerName(g.Module, g.Node)] = g.Credential
				}
			}
			in.Provided = append(in.Provided, Provided{Module: a.Module, Grant: p.Grant, Consumers: consumers})
		}
	}
}

// grantViewOf is the view composing node reads, its own modules in
// modules: the grants, and, when node consumes any, every registered
// module and each provider node's assignments.
func (cm *composer) grantViewOf(ctx context.Context, node string, modules map[string]spec.Module) (grantView, error) {
	gs, err := cm.db.Grants(ctx)
	if err != nil {
		return grantView{}, fmt.Errorf("compose node %q: %w", node, err)
	}
	v := grantView{grants: gs, modules: modules, assigned: map[string][]store.Assignment{}}
	every := false // v.modules holds every registered module
	for _, g := range gs {
		if g.Node != node {
			continue
		}
		if !every {
			every = true
			if v.modules, err = cm.modulesByName(ctx); err != nil {
				return grantView{}, fmt.Errorf("compose node %q: %w", node, err)
			}
		}
		if _, read := v.assigned[g.Provider]; !read {
			as, err := cm.db.AssignmentsOf(ctx, g.Provider)
			if err != nil {
				return grantView{}, fmt.Errorf("compose node %q: %w", node, err)
			}
			v.assigned[g.Provider] = as
		}
	}
	return v, nil
}
