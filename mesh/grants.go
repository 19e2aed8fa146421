package mesh

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// mintCredential is a new credential: 32 random bytes, base64url.
func mintCredential() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// grantProviders are the nodes whose modules provide each grant, sorted.
func (cat *catalogue) grantProviders(ctx context.Context) (map[string][]string, error) {
	mods, err := cat.db.Modules(ctx)
	if err != nil {
		return nil, err
	}
	provides := map[string][]string{} // module to the grants it provides
	for _, m := range mods {
		for _, p := range m.Module.Provides {
			provides[m.Module.Name] = append(provides[m.Module.Name], p.Grant)
		}
	}
	as, err := cat.db.Assignments(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, a := range as {
		for _, g := range provides[a.Module] {
			if !slices.Contains(out[g], a.Node) {
				out[g] = append(out[g], a.Node)
			}
		}
	}
	for _, nodes := range out {
		sort.Strings(nodes)
	}
	return out, nil
}

// checkGrantRequest refuses what an assign gives that the controller
// fills (a setting a grant fills) or that names no grant the module
// consumes.
func checkGrantRequest(mod spec.Module, req spec.AssignRequest) error {
	filled := mod.FilledSettings()
	for _, name := range sortedKeys(req.Settings) {
		if g, ok := filled[name]; ok {
			return callerError(fmt.Sprintf("setting %q of module %q is filled by the controller for grant %q: leave out --set %s; nothing was assigned",
				name, mod.Name, g, name))
		}
	}
	for _, g := range sortedKeys(req.Grants) {
		if !slices.ContainsFunc(mod.Consumes, func(c spec.Consume) bool { return c.Grant == g }) {
			return callerError(fmt.Sprintf("module %q consumes no grant %q; nothing was assigned", mod.Name, g))
		}
		if err := spec.CheckName("node", req.Grants[g]); err != nil {
			return callerError(fmt.Sprintf("--grant %s: %v; nothing was assigned", g, err))
		}
	}
	return nil
}

// chooseProviders are the grants the assignment of mod consumes, each
// with its provider node: the one node whose module provides it, the one
// --grant names among several, or, given none, the one the consumer holds
// already. None, or several and none named, is refused, naming them.
// changed are the provider nodes whose consumers it changes: those of a
// grant the consumer did not hold, or held from another node.
func (cat *catalogue) chooseProviders(ctx context.Context, mod spec.Module, req spec.AssignRequest) (gs []store.Grant, changed []string, err error) {
	if len(mod.Consumes) == 0 {
		return nil, nil, nil
	}
	providers, err := cat.grantProviders(ctx)
	if err != nil {
		return nil, nil, err
	}
	held, err := cat.db.Grants(ctx)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range mod.Consumes {
		candidates := providers[c.Grant]
		named, ok := req.Grants[c.Grant]
		var provider string
		switch {
		case len(candidates) == 0:
			return nil, nil, refusedError(fmt.Sprintf("no node provides grant %q that module %q consumes: assign a module that provides it first; nothing was assigned", c.Grant, mod.Name))
		case ok && !slices.Contains(candidates, named):
			return nil, nil, callerError(fmt.Sprintf("--grant %s=%s: node %q does not provide grant %q (%s do); nothing was assigned",
				c.Grant, named, named, c.Grant, strings.Join(candidates, ", ")))
		case ok:
			provider = named
		case len(candidates) == 1:
			provider = candidates[0]
		default:
			for _, h := range held {
				if h.Module == mod.Name && h.Node == req.Node && h.Grant == c.Grant && slices.Contains(candidates, h.Provider) {
					provider = h.Provider
				}
			}
			if provider == "" {
				return nil, nil, callerError(fmt.Sprintf("grant %q is provided by %s: name one (mesh assign --grant %s=NODE %s %s); nothing was assigned",
					c.Grant, strings.Join(candidates, " and "), c.Grant, mod.Name, req.Node))
			}
		}
		gs = append(gs, store.Grant{Module: mod.Name, Node: req.Node, Grant: c.Grant, Provider: provider, Credential: mintCredential(), MintedAt: cat.now()})
		was := ""
		for _, h := range held {
			if h.Module == mod.Name && h.Node == req.Node && h.Grant == c.Grant {
				was = h.Provider
			}
		}
		if was != provider {
			changed = append(changed, provider)
			if was != "" {
				changed = append(changed, was)
			}
		}
	}
	return gs, changed, nil
}

// orphanedBy are the consumers (MODULE-NODE) that hold a grant module
// provides on node, were it unassigned there, by name.
func (cat *catalogue) orphanedBy(ctx context.Context, module, node string) ([]string, []string, error) {
	found, err := cat.db.Module(ctx, module)
	if err != nil || len(found.Module.Provides) == 0 {
		return nil, nil, nil // an unknown module is unassign's to refuse
	}
	gs, err := cat.db.Grants(ctx)
	if err != nil {
		return nil, nil, err
	}
	var consumers, nodes []string
	for _, g := range gs {
		if _, ok := found.Module.Provider(g.Grant); ok && g.Provider == node {
			consumers = append(consumers, spec.GrantConsumerName(g.Module, g.Node))
			if !slices.Contains(nodes, g.Node) {
				nodes = append(nodes, g.Node)
			}
		}
	}
	sort.Strings(consumers)
	return consumers, nodes, nil
}

// providersOf are the provider nodes of the grants module holds on node.
func (cat *catalogue) providersOf(ctx context.Context, module, node string) ([]string, error) {
	gs, err := cat.db.Grants(ctx)
	if err != nil {
		return nil, err
	}
	var nodes []string
	for _, g := range gs {
		if g.Module == module && g.Node == node && !slices.Contains(nodes, g.Provider) {
			nodes = append(nodes, g.Provider)
		}
	}
	return nodes, nil
}

// withChanged adds nodes to what res says changed, sorted.
func withChanged(res spec.AssignResult, nodes ...string) spec.AssignResult {
	for _, n := range nodes {
		if !slices.Contains(res.Changed, n) {
			res.Changed = append(res.Changed, n)
		}
	}
	sort.Strings(res.Changed)
	return res
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// listGrants is every credential minted, never its value.
func (cat *catalogue) listGrants(ctx context.Context, _ spec.GrantListRequest) (spec.GrantListResult, error) {
	gs, err := cat.db.Grants(ctx)
	if err != nil {
		return spec.GrantListResult{}, err
	}
	providers, err := cat.grantProviders(ctx)
	if err != nil {
		return spec.GrantListResult{}, err
	}
	res := spec.GrantListResult{Grants: []spec.GrantInfo{}}
	for _, g := range gs {
		res.Grants = append(res.Grants, spec.GrantInfo{Provider: g.Provider, Consumer: spec.GrantConsumerName(g.Module, g.Node),
			Module: g.Module, Node: g.Node, Grant: g.Grant, MintedAt: g.MintedAt.UTC(), Orphaned: !slices.Contains(providers[g.Grant], g.Provider)})
	}
	return res, nil
}

// rotateGrants mints a new credential for each grant the module consumes
// on the node, in one transaction, and names the nodes a push carries the
// new ones to: the consumer's and each provider's.
func (cat *catalogue) rotateGrants(ctx context.Context, req spec.GrantRotateRequest) (spec.GrantRotateResult, error) {
	if err := checkAssignNames(spec.AssignRequest{Module: req.Module, Node: req.Node}); err != nil {
		return spec.GrantRotateResult{}, err
	}
	gs, err := cat.db.Grants(ctx)
	if err != nil {
		return spec.GrantRotateResult{}, err
	}
	creds := map[string]string{}
	res := spec.GrantRotateResult{Grants: []string{}, Changed: []string{req.Node}}
	for _, g := range gs {
		if g.Module == req.Module && g.Node == req.Node {
			creds[g.Grant] = mintCredential()
			res.Grants = append(res.Grants, g.Grant)
			if !slices.Contains(res.Changed, g.Provider) {
				res.Changed = append(res.Changed, g.Provider)
			}
		}
	}
	if len(creds) == 0 {
		return spec.GrantRotateResult{}, notFoundError(fmt.Sprintf("module %q on node %q holds no grant: mesh grant list shows those minted", req.Module, req.Node))
	}
	if err := cat.db.RotateGrants(ctx, req.Module, req.Node, creds, cat.now()); err != nil {
		return spec.GrantRotateResult{}, err
	}
	sort.Strings(res.Grants)
	sort.Strings(res.Changed)
	cat.log.Info("grants rotated", "module", req.Module, "node", req.Node, "grants", res.Grants)
	return res, nil
}
