package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// catalogue is the modules operators register and assign to nodes.
type catalogue struct {
	base
	// composeOne composes a node from the modules given (gather.go).
	composeOne func(ctx context.Context, n store.Node, modules map[string]spec.Module) (Plan, error, error)
	// nudgeCollect asks for a collection of blobs that may be unused now.
	nudgeCollect func()
	// usersChanged gives the bus its users anew (edge.go).
	usersChanged func(ctx context.Context) error
}

// registerModules checks every module and records them all, or none.
func (cat *catalogue) registerModules(ctx context.Context, req spec.ModuleRegisterRequest) (spec.ModuleRegisterResult, error) {
	if len(req.Modules) == 0 {
		return spec.ModuleRegisterResult{}, callerError("no module to register")
	}
	seen := map[string]bool{}
	for _, m := range req.Modules {
		if err := m.Check(); err != nil {
			return spec.ModuleRegisterResult{}, callerError(err.Error() + "; nothing was registered")
		}
		if seen[m.Name] {
			return spec.ModuleRegisterResult{}, callerError(fmt.Sprintf("module %q is given twice; nothing was registered", m.Name))
		}
		seen[m.Name] = true
	}
	if err := cat.providesKept(ctx, req.Modules); err != nil {
		return spec.ModuleRegisterResult{}, err
	}
	now := cat.now()
	previous, err := cat.db.RegisterModules(ctx, req.Modules, now)
	if err != nil {
		return spec.ModuleRegisterResult{}, err
	}
	res := spec.ModuleRegisterResult{Modules: []spec.ModuleInfo{}}
	for _, m := range req.Modules {
		info := spec.ModuleInfo{Name: m.Name, Version: m.Version, Description: m.Description, Resources: len(m.Resources),
			Registered: now.UTC(), Previous: previous[m.Name], Nodes: []string{}}
		res.Modules = append(res.Modules, info)
		cat.log.Info("module registered", "module", m.Name, "version", m.Version, "previous", previous[m.Name])
	}
	if len(previous) > 0 {
		// A version replaced may have left blobs nothing else names.
		cat.nudgeCollect()
	}
	edges := len(previous) > 0 // a version replaced may have declared one
	for _, m := range req.Modules {
		edges = edges || declaresEdge(m)
	}
	cat.edgesChanged(ctx, edges)
	return res, nil
}

func (cat *catalogue) moduleInfos(ctx context.Context) ([]spec.ModuleInfo, map[string]spec.Module, error) {
	mods, err := cat.db.Modules(ctx)
	if err != nil {
		return nil, nil, err
	}
	as, err := cat.db.Assignments(ctx)
	if err != nil {
		return nil, nil, err
	}
	nodes := map[string][]string{}
	for _, a := range as {
		nodes[a.Module] = append(nodes[a.Module], a.Node)
	}
	infos := []spec.ModuleInfo{}
	byName := map[string]spec.Module{}
	for _, m := range mods {
		ns := nodes[m.Module.Name]
		if ns == nil {
			ns = []string{}
		}
		sort.Strings(ns)
		infos = append(infos, spec.ModuleInfo{Name: m.Module.Name, Version: m.Module.Version, Description: m.Module.Description,
			Resources: len(m.Module.Resources), Registered: m.Registered.UTC(), Nodes: ns})
		byName[m.Module.Name] = m.Module
	}
	return infos, byName, nil
}

func (cat *catalogue) listModules(ctx context.Context, _ spec.ModuleListRequest) (spec.ModuleListResult, error) {
	infos, _, err := cat.moduleInfos(ctx)
	return spec.ModuleListResult{Modules: infos}, err
}

func (cat *catalogue) showModule(ctx context.Context, req spec.ModuleShowRequest) (spec.ModuleShowResult, error) {
	infos, byName, err := cat.moduleInfos(ctx)
	if err != nil {
		return spec.ModuleShowResult{}, err
	}
	for _, info := range infos {
		if info.Name == req.Name {
			m := byName[req.Name]
			// A secret setting's default is a secret too.
			settings := make([]spec.Setting, len(m.Settings))
			for i, s := range m.Settings {
				if s.Secret && s.Default != nil {
					redacted := "(secret)"
					s.Default = &redacted
				}
				settings[i] = s
			}
			m.Settings = settings
			return spec.ModuleShowResult{Info: info, Module: m}, nil
		}
	}
	return spec.ModuleShowResult{}, notFoundError(fmt.Sprintf("no module called %q: mesh module list shows the registered ones", req.Name))
}

// removeModule removes a module from the catalogue. One still assigned is
// refused, naming the nodes, and nothing changes: unassign it and push
// first, so no host is left holding what the catalogue no longer knows.
func (cat *catalogue) removeModule(ctx context.Context, req spec.ModuleRemoveRequest) (spec.ModuleRemoveResult, error) {
	if err := spec.CheckName("module", req.Name); err != nil {
		return spec.ModuleRemoveResult{}, callerError(err.Error() + "; nothing was removed")
	}
	m, err := cat.db.RemoveModule(ctx, req.Name)
	var assigned *store.AssignedError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return spec.ModuleRemoveResult{}, notFoundError(fmt.Sprintf("no module called %q: mesh module list shows the registered ones", req.Name))
	case errors.As(err, &assigned):
		return spec.ModuleRemoveResult{}, refusedError(fmt.Sprintf("module %q is assigned to %s: unassign it there and push first (mesh unassign %s NODE); nothing was removed",
			req.Name, strings.Join(assigned.Nodes, ", "), req.Name))
	case err != nil:
		return spec.ModuleRemoveResult{}, err
	}
	cat.log.Info("module removed", "module", m.Module.Name, "version", m.Module.Version)
	cat.nudgeCollect()
	return spec.ModuleRemoveResult{Name: m.Module.Name, Version: m.Module.Version}, nil
}

// checkAssignNames refuses a module or node name that breaks the naming
// rule, naming the rule: such a name is never "not found".
func checkAssignNames(req spec.AssignRequest) error {
	if err := spec.CheckName("module", req.Module); err != nil {
		return callerError(err.Error() + "; nothing was changed")
	}
	if err := spec.CheckName("node", req.Node); err != nil {
		return callerError(err.Error() + "; nothing was changed")
	}
	return nil
}

func (cat *catalogue) assign(ctx context.Context, req spec.AssignRequest) (spec.AssignResult, error) {
	if err := checkAssignNames(req); err != nil {
		return spec.AssignResult{}, err
	}
	found, err := cat.db.Module(ctx, req.Module)
	if errors.Is(err, store.ErrNotFound) {
		return spec.AssignResult{}, notFoundError(fmt.Sprintf("no module called %q: mesh module list shows the registered ones", req.Module))
	}
	if err != nil {
		return spec.AssignResult{}, err
	}
	mod := &found.Module
	if req.Force {
		return spec.AssignResult{}, callerError("force is for unassign; nothing was assigned")
	}
	if err := checkGrantRequest(*mod, req); err != nil {
		return spec.AssignResult{}, err
	}
	// A second assign keeps the values it is not given, but those unset.
	unset, check, err := cat.keptSettings(ctx, *mod, req)
	if err != nil {
		return spec.AssignResult{}, err
	}
	// The settings are checked as composition will check them, so a bad one
	// is refused now, naming it, and nothing is recorded. Those the
	// module's grants fill count as given.
	for name := range mod.FilledSettings() {
		check[name] = ""
	}
	if _, err := settingValues(req.Node, *mod, check); err != nil {
		var se *SettingError
		if errors.As(err, &se) {
			var names []string
			for _, s := range mod.Settings {
				names = append(names, s.Name)
			}
			return spec.AssignResult{}, callerError(fmt.Sprintf("module %q declares no setting %q (it declares: %s); nothing was assigned", req.Module, se.Setting, orNone(names)))
		}
		var ce *ComposeError
		if errors.As(err, &ce) {
			return spec.AssignResult{}, callerError(ce.Reason + "; nothing was assigned")
		}
		return spec.AssignResult{}, err
	}
	grants, providers, err := cat.chooseProviders(ctx, *mod, req)
	if err != nil {
		return spec.AssignResult{}, err
	}
	res, err := cat.changedBy(ctx, req.Node, func() error {
		err := cat.db.Reassign(ctx, req.Module, req.Node, req.Settings, unset, cat.now())
		if errors.Is(err, store.ErrNotFound) {
			return notFoundError(err.Error())
		}
		if err == nil && len(grants) > 0 {
			// A credential the consumer holds already is kept.
			if err := cat.db.PutGrants(ctx, grants); err != nil {
				return fmt.Errorf("mint the grants of %s on %s: %w", req.Module, req.Node, err)
			}
		}
		if err == nil {
			// Setting names only: a secret's value never reaches a log.
			names := make([]string, 0, len(req.Settings))
			for k := range req.Settings {
				names = append(names, k)
			}
			sort.Strings(names)
			cat.log.Info("module assigned", "module", req.Module, "node", req.Node, "settings", names, "unset", req.Unset)
		}
		return err
	})
	cat.edgesChanged(ctx, err == nil && declaresEdge(*mod))
	if err != nil || res.Unknown != "" {
		return res, err
	}
	// A provider's file gains or loses the consumer's line.
	return withChanged(res, providers...), nil
}

// keptSettings checks req.Unset against mod and reads what the node
// holds of mod already: it returns the names to drop (those unset, and
// kept ones mod no longer declares) and the settings the assignment will
// hold, opened, for the check. A setting unset that mod does not declare,
// that is given as well, or that is required with no default is refused,
// naming it.
func (cat *catalogue) keptSettings(ctx context.Context, mod spec.Module, req spec.AssignRequest) ([]string, map[string]string, error) {
	drop := map[string]bool{}
	for _, name := range req.Unset {
		s, ok := mod.Setting(name)
		_, given := req.Settings[name]
		switch {
		case !ok:
			var names []string
			for _, s := range mod.Settings {
				names = append(names, s.Name)
			}
			return nil, nil, callerError(fmt.Sprintf("--unset %s: module %q declares no setting %q (it declares: %s); nothing was assigned", name, mod.Name, name, orNone(names)))
		case given:
			return nil, nil, callerError(fmt.Sprintf("setting %q is both set and unset; nothing was assigned", name))
		case s.Required && s.Default == nil:
			return nil, nil, callerError(fmt.Sprintf("--unset %s: setting %q of module %q is required and has no default: give it another value instead (--set %s=VALUE); nothing was assigned", name, name, mod.Name, name))
		}
		drop[name] = true
	}
	held := map[string]string{}
	switch a, err := cat.db.Assignment(ctx, req.Module, req.Node); {
	case err == nil:
		held = a.Settings
	case !errors.Is(err, store.ErrNotFound):
		return nil, nil, fmt.Errorf("read the settings %s holds on %s: %w; nothing was assigned", req.Module, req.Node, err)
	}
	check := map[string]string{}
	for name, v := range held {
		if _, declared := mod.Setting(name); !declared {
			drop[name] = true
		}
		if !drop[name] {
			check[name] = v
		}
	}
	for name, v := range req.Settings {
		check[name] = v
	}
	unset := make([]string, 0, len(drop))
	for name := range drop {
		unset = append(unset, name)
	}
	sort.Strings(unset)
	return unset, check, nil
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func (cat *catalogue) unassign(ctx context.Context, req spec.AssignRequest) (spec.AssignResult, error) {
	if err := checkAssignNames(req); err != nil {
		return spec.AssignResult{}, err
	}
	// A provider whose consumers still hold its grant stays unless forced:
	// they would be left with a credential nothing accepts.
	consumers, _, err := cat.orphanedBy(ctx, req.Module, req.Node)
	if err != nil {
		return spec.AssignResult{}, err
	}
	if len(consumers) > 0 && !req.Force {
		return spec.AssignResult{}, refusedError(fmt.Sprintf("module %q on %q provides grants to %s: unassign them first, or give --force (they keep their last credential, orphaned); nothing was changed",
			req.Module, req.Node, strings.Join(consumers, ", ")))
	}
	// The consumer's credentials go with it, and its line from each provider.
	providers, err := cat.providersOf(ctx, req.Module, req.Node)
	if err != nil {
		return spec.AssignResult{}, err
	}
	res, err := cat.changedBy(ctx, req.Node, func() error {
		err := cat.db.Unassign(ctx, req.Module, req.Node)
		if errors.Is(err, store.ErrNotFound) {
			return notFoundError(fmt.Sprintf("module %q is not assigned to node %q", req.Module, req.Node))
		}
		if err == nil {
			cat.log.Info("module unassigned", "module", req.Module, "node", req.Node, "orphaned", consumers)
		}
		return err
	})
	cat.edgesChanged(ctx, err == nil && cat.isEdgeModule(ctx, req.Module))
	if err != nil || res.Unknown != "" {
		return res, err
	}
	return withChanged(res, providers...), nil
}

// changedBy records a change of node's assignments (record) and says which
// nodes' declarations it alters. Only node's own resources and routes can
// change: it is composed before and after from the modules assigned to it
// (never the whole catalogue), and altered when its resources differ or it
// composes on one side only; when its routes differ, the roster message
// changes, which no declaration holds. When node
// cannot be composed, the change is recorded all the same and the result
// says why the nodes are not known.
func (cat *catalogue) changedBy(ctx context.Context, node string, record func() error) (spec.AssignResult, error) {
	before, ownBefore, errBefore := cat.composeByName(ctx, node)
	if err := record(); err != nil {
		return spec.AssignResult{}, err
	}
	res := spec.AssignResult{Changed: []string{}}
	after, ownAfter, err := cat.composeByName(ctx, node)
	if err == nil {
		err = errBefore
	}
	routed := err == nil && !slices.Equal(routeKeys(before.Routes), routeKeys(after.Routes))
	// The nodes a push composes: named only when the roster changes,
	// counted otherwise (reading every name would be most of an assign).
	var all []string
	composed := 0
	switch {
	case err != nil:
	case routed:
		all, err = cat.composedNodes(ctx)
		composed = len(all)
	default:
		var nodes, leaving int
		nodes, leaving, err = cat.db.NodesLeaving(ctx)
		composed = nodes - leaving
	}
	if err != nil {
		res.Unknown = err.Error()
		return res, nil
	}
	res.Nodes, res.Roster = composed, routed
	own := (ownBefore == nil) != (ownAfter == nil) || (ownAfter == nil && planKey(before) != planKey(after))
	switch {
	case routed:
		if own && slices.Contains(all, node) {
			res.Changed = []string{node}
		}
	case (ownBefore == nil) != (ownAfter == nil):
		res.Changed = []string{node}
	case ownAfter == nil && planKey(before) != planKey(after):
		res.Changed = []string{node}
	}
	return res, nil
}

// composeByName composes node from the modules assigned to it, as
// composeOne does. A node not in the mesh (or leaving it) composes to
// nothing.
func (cat *catalogue) composeByName(ctx context.Context, node string) (plan Plan, own, err error) {
	n, err := cat.db.Node(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return Plan{}, nil, nil
	}
	if err != nil {
		return Plan{}, nil, err
	}
	if !n.Removing.IsZero() {
		return Plan{}, nil, nil
	}
	as, err := cat.db.AssignmentsOf(ctx, node)
	if err != nil {
		return Plan{}, nil, fmt.Errorf("compose node %q: %w", node, err)
	}
	modules := make(map[string]spec.Module, len(as))
	for _, a := range as {
		m, err := cat.db.Module(ctx, a.Module)
		if err != nil {
			return Plan{}, nil, fmt.Errorf("compose node %q: %w", node, err)
		}
		modules[a.Module] = m.Module
	}
	return cat.composeOne(ctx, n, modules)
}

// composedNodes are the nodes a push composes: every node not leaving the
// mesh, by name.
func (cat *catalogue) composedNodes(ctx context.Context) ([]string, error) {
	// Names only: each assign asks, and reading every node whole (its
	// facts decoded) would cost a large mesh seconds an assign.
	nodes, err := cat.db.NodeKeys(ctx)
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, n := range nodes {
		if !n.Removing {
			names = append(names, n.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// routeKeys are routes as comparable, sorted strings.
func routeKeys(routes []spec.RosterRoute) []string {
	keys := make([]string, 0, len(routes))
	for _, r := range routes {
		b, _ := json.Marshal(r)
		keys = append(keys, string(b))
	}
	sort.Strings(keys)
	return keys
}

// planKey is a plan's resources as bytes.
func planKey(p Plan) string {
	b, _ := json.Marshal(p.Resources)
	return string(b)
}
