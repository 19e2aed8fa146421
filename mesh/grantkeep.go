package mesh

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// providesKept refuses a register that would orphan consumers: a new
// version of a module that provides a grant on a node, its consumers
// holding credentials from it, and the version no longer providing the
// grant. The node's file of credentials would go at the next push while
// the consumers keep a credential nothing accepts. A grant orphaned
// already (its provider unassigned with --force) is not the register's
// doing and does not refuse it.
func (cat *catalogue) providesKept(ctx context.Context, mods []spec.Module) error {
	gs, err := cat.db.Grants(ctx)
	if err != nil {
		return fmt.Errorf("read the grants a new version may stop providing: %w; nothing was registered", err)
	}
	if len(gs) == 0 {
		return nil
	}
	registered, err := cat.db.Modules(ctx)
	if err != nil {
		return fmt.Errorf("read the modules a new version replaces: %w; nothing was registered", err)
	}
	as, err := cat.db.Assignments(ctx)
	if err != nil {
		return fmt.Errorf("read the assignments of the grants' providers: %w; nothing was registered", err)
	}
	before := grantView{grants: gs, modules: map[string]spec.Module{}, assigned: map[string][]store.Assignment{}}
	for _, m := range registered {
		before.modules[m.Module.Name] = m.Module
	}
	for _, a := range as {
		before.assigned[a.Node] = append(before.assigned[a.Node], a)
	}
	after := grantView{grants: gs, modules: make(map[string]spec.Module, len(before.modules)), assigned: before.assigned}
	for name, m := range before.modules {
		after.modules[name] = m
	}
	replaced := map[string]bool{}
	for _, m := range mods {
		after.modules[m.Name] = m
		replaced[m.Name] = true
	}
	type key struct{ module, node, grant string }
	orphaned := map[key]bool{}
	for _, g := range before.orphaned() {
		orphaned[key{g.Module, g.Node, g.Grant}] = true
	}
	type lost struct{ module, version, grant, provider string }
	consumers := map[lost][]store.Grant{}
	for _, g := range after.orphaned() {
		if orphaned[key{g.Module, g.Node, g.Grant}] {
			continue
		}
		for _, a := range before.assigned[g.Provider] {
			if _, ok := before.modules[a.Module].Provider(g.Grant); ok && replaced[a.Module] {
				l := lost{a.Module, after.modules[a.Module].Version, g.Grant, g.Provider}
				consumers[l] = append(consumers[l], g)
				break
			}
		}
	}
	if len(consumers) == 0 {
		return nil
	}
	var refusals []string
	for l, held := range consumers {
		sort.Slice(held, func(i, j int) bool { return held[i].Module+"\x00"+held[i].Node < held[j].Module+"\x00"+held[j].Node })
		names, unassigns := make([]string, len(held)), make([]string, len(held))
		for i, g := range held {
			names[i] = spec.GrantConsumerName(g.Module, g.Node)
			unassigns[i] = "mesh unassign " + g.Module + " " + g.Node
		}
		refusals = append(refusals, fmt.Sprintf("module %q version %s does not provide grant %q, which node %q provides to %s: unassign them first (%s), or keep the grant in the version's provides",
			l.module, l.version, l.grant, l.provider, strings.Join(names, ", "), strings.Join(unassigns, "; ")))
	}
	sort.Strings(refusals)
	return refusedError(strings.Join(refusals, "; ") + "; nothing was registered")
}
