package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// moduleWrites are the writes of the modules and their assignments.
type moduleWrites struct{ j *Journal }

type registerArgs struct {
	Mods []spec.Module
	At   time.Time
}

type assignArgs struct {
	Module, Node string
	Set          map[string]string
	Unset        []string
	At           time.Time
}

var (
	registerModules = op[registerArgs, map[string]string]{"RegisterModules", func(ctx context.Context, db *store.DB, a registerArgs) (map[string]string, error) {
		return db.RegisterModules(ctx, a.Mods, a.At)
	}}
	removeModule = op[assignArgs, store.Module]{"RemoveModule", func(ctx context.Context, db *store.DB, a assignArgs) (store.Module, error) {
		return db.RemoveModule(ctx, a.Module)
	}}
	assign = op[assignArgs, none]{"Assign", func(ctx context.Context, db *store.DB, a assignArgs) (none, error) {
		return none{}, db.Assign(ctx, a.Module, a.Node, a.Set, a.At)
	}}
	reassign = op[assignArgs, none]{"Reassign", func(ctx context.Context, db *store.DB, a assignArgs) (none, error) {
		return none{}, db.Reassign(ctx, a.Module, a.Node, a.Set, a.Unset, a.At)
	}}
	unassign = op[assignArgs, none]{"Unassign", func(ctx context.Context, db *store.DB, a assignArgs) (none, error) {
		return none{}, db.Unassign(ctx, a.Module, a.Node)
	}}
	changeSettings = op[[]store.SettingsChange, int]{"ChangeSettings", func(ctx context.Context, db *store.DB, cs []store.SettingsChange) (int, error) {
		return db.ChangeSettings(ctx, cs)
	}}
)

func moduleOps() []func() (string, applyFunc) {
	return []func() (string, applyFunc){registerModules.apply, removeModule.apply, assign.apply,
		reassign.apply, unassign.apply, changeSettings.apply}
}

// RegisterModules registers mods at at.
func (w moduleWrites) RegisterModules(ctx context.Context, mods []spec.Module, at time.Time) (map[string]string, error) {
	return registerModules.call(ctx, w.j, registerArgs{mods, at})
}

// RemoveModule removes the module name.
func (w moduleWrites) RemoveModule(ctx context.Context, name string) (store.Module, error) {
	return removeModule.call(ctx, w.j, assignArgs{Module: name})
}

// Assign assigns module to node with settings.
func (w moduleWrites) Assign(ctx context.Context, module, node string, settings map[string]string, at time.Time) error {
	_, err := assign.call(ctx, w.j, assignArgs{Module: module, Node: node, Set: settings, At: at})
	return err
}

// Reassign changes the settings of module on node.
func (w moduleWrites) Reassign(ctx context.Context, module, node string, set map[string]string, unset []string, at time.Time) error {
	_, err := reassign.call(ctx, w.j, assignArgs{module, node, set, unset, at})
	return err
}

// Unassign takes module off node.
func (w moduleWrites) Unassign(ctx context.Context, module, node string) error {
	_, err := unassign.call(ctx, w.j, assignArgs{Module: module, Node: node})
	return err
}

// RewriteSettings computes rewrite of the assignments of modules (every
// module when none is) on the view, then appends the changes it made as
// one entry, each made only if the settings are still those it read:
// the rewrite itself (sealing, with random nonces) is never replayed.
func (w moduleWrites) RewriteSettings(ctx context.Context, modules []string, rewrite func(store.Assignment, spec.Module) (map[string]string, bool, error)) (int, error) {
	as, err := w.j.db.Assignments(ctx)
	if err != nil {
		return 0, fmt.Errorf("rewrite settings: %w", err)
	}
	mods := map[string]*spec.Module{}
	var cs []store.SettingsChange
	for _, a := range as {
		if len(modules) > 0 && !slices.Contains(modules, a.Module) {
			continue
		}
		m, ok := mods[a.Module]
		if !ok {
			switch sm, err := w.j.db.Module(ctx, a.Module); {
			case err == nil:
				m = &sm.Module
			case !errors.Is(err, store.ErrNotFound):
				return 0, fmt.Errorf("rewrite settings: %w", err)
			}
			mods[a.Module] = m
		}
		if m == nil {
			continue
		}
		to, changed, err := rewrite(store.Assignment{Module: a.Module, Node: a.Node, Settings: a.Settings}, *m)
		if err != nil {
			return 0, fmt.Errorf("rewrite settings: %w", err)
		}
		if changed {
			cs = append(cs, store.SettingsChange{Module: a.Module, Node: a.Node, From: a.Settings, To: to})
		}
	}
	if len(cs) == 0 {
		return 0, nil
	}
	return changeSettings.call(ctx, w.j, cs)
}
