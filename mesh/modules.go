package mesh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// registerModules checks every module and records them all, or none.
func (c *Controller) registerModules(ctx context.Context, req spec.ModuleRegisterRequest) (spec.ModuleRegisterResult, error) {
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
	now := c.cfg.Now()
	previous, err := c.deps.DB.RegisterModules(ctx, req.Modules, now)
	if err != nil {
		return spec.ModuleRegisterResult{}, err
	}
	res := spec.ModuleRegisterResult{Modules: []spec.ModuleInfo{}}
	for _, m := range req.Modules {
		info := spec.ModuleInfo{Name: m.Name, Version: m.Version, Description: m.Description, Resources: len(m.Resources),
			Registered: now.UTC(), Previous: previous[m.Name], Nodes: []string{}}
		res.Modules = append(res.Modules, info)
		c.log.Info("module registered", "module", m.Name, "version", m.Version, "previous", previous[m.Name])
	}
	return res, nil
}

func (c *Controller) moduleInfos(ctx context.Context) ([]spec.ModuleInfo, map[string]spec.Module, error) {
	mods, err := c.deps.DB.Modules(ctx)
	if err != nil {
		return nil, nil, err
	}
	as, err := c.deps.DB.Assignments(ctx)
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

func (c *Controller) listModules(ctx context.Context, _ spec.ModuleListRequest) (spec.ModuleListResult, error) {
	infos, _, err := c.moduleInfos(ctx)
	return spec.ModuleListResult{Modules: infos}, err
}

func (c *Controller) showModule(ctx context.Context, req spec.ModuleShowRequest) (spec.ModuleShowResult, error) {
	infos, byName, err := c.moduleInfos(ctx)
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

func (c *Controller) assign(ctx context.Context, req spec.AssignRequest) (spec.AssignResult, error) {
	if err := checkAssignNames(req); err != nil {
		return spec.AssignResult{}, err
	}
	mods, err := c.deps.DB.Modules(ctx)
	if err != nil {
		return spec.AssignResult{}, err
	}
	var mod *spec.Module
	for i := range mods {
		if mods[i].Module.Name == req.Module {
			mod = &mods[i].Module
		}
	}
	if mod == nil {
		return spec.AssignResult{}, notFoundError(fmt.Sprintf("no module called %q: mesh module list shows the registered ones", req.Module))
	}
	// The settings are checked as composition will check them, so a bad one
	// is refused now, naming it, and nothing is recorded.
	if _, err := settingValues(req.Node, *mod, req.Settings); err != nil {
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
	return c.changedBy(ctx, func() error {
		err := c.deps.DB.Assign(ctx, req.Module, req.Node, req.Settings, c.cfg.Now())
		if errors.Is(err, store.ErrNotFound) {
			return notFoundError(err.Error())
		}
		if err == nil {
			// Setting names only: a secret's value never reaches a log.
			names := make([]string, 0, len(req.Settings))
			for k := range req.Settings {
				names = append(names, k)
			}
			sort.Strings(names)
			c.log.Info("module assigned", "module", req.Module, "node", req.Node, "settings", names)
		}
		return err
	})
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func (c *Controller) unassign(ctx context.Context, req spec.AssignRequest) (spec.AssignResult, error) {
	if err := checkAssignNames(req); err != nil {
		return spec.AssignResult{}, err
	}
	return c.changedBy(ctx, func() error {
		err := c.deps.DB.Unassign(ctx, req.Module, req.Node)
		if errors.Is(err, store.ErrNotFound) {
			return notFoundError(fmt.Sprintf("module %q is not assigned to node %q", req.Module, req.Node))
		}
		if err == nil {
			c.log.Info("module unassigned", "module", req.Module, "node", req.Node)
		}
		return err
	})
}

// changedBy records a change of assignments (record) and says which nodes'
// declarations it alters: each node composed before and after, compared
// (its resources and the roster). A node that does not compose after is
// altered unless it did not before either: nothing would be sent to it
// either way. When the mesh cannot be composed, the change is recorded all
// the same and the result says why the nodes are not known.
func (c *Controller) changedBy(ctx context.Context, record func() error) (spec.AssignResult, error) {
	before, errBefore := c.gather(ctx)
	if err := record(); err != nil {
		return spec.AssignResult{}, err
	}
	res := spec.AssignResult{Changed: []string{}}
	after, err := c.gather(ctx)
	if err == nil {
		err = errBefore
	}
	if err != nil {
		res.Unknown = err.Error()
		return res, nil
	}
	res.Nodes = len(after.plans) + len(after.own)
	for node := range after.plans {
		if before.own[node] != nil || composedKey(before, node) != composedKey(after, node) {
			res.Changed = append(res.Changed, node)
		}
	}
	for node := range after.own {
		if before.own[node] == nil {
			res.Changed = append(res.Changed, node)
		}
	}
	sort.Strings(res.Changed)
	return res, nil
}

// composedKey is what g would send node that composes: its resources and
// the roster, as bytes.
func composedKey(g gathered, node string) string {
	b, _ := json.Marshal(struct {
		R []spec.Resource
		N spec.Roster
	}{g.plans[node].Resources, g.roster})
	return string(b)
}

// putBlob takes one chunk of an upload; the blob is stored once it is whole
// and its digest verified.
func (c *Controller) putBlob(ctx context.Context, req spec.BlobPutRequest) (spec.BlobPutResult, error) {
	if req.Size <= 0 || req.Size > 1<<30 {
		return spec.BlobPutResult{}, callerError(fmt.Sprintf("blob %s: size %d is not from 1 byte to 1 GiB", req.Digest, req.Size))
	}
	if has, err := c.deps.DB.HasBlob(ctx, req.Digest); err != nil {
		return spec.BlobPutResult{}, err
	} else if has {
		return spec.BlobPutResult{Complete: true}, nil
	}
	c.uploadsMu.Lock()
	defer c.uploadsMu.Unlock()
	if c.uploads == nil {
		c.uploads = map[string]*bytes.Buffer{}
	}
	buf := c.uploads[req.Digest]
	if req.Offset == 0 {
		buf = &bytes.Buffer{}
		c.uploads[req.Digest] = buf
	}
	if buf == nil || int64(buf.Len()) != req.Offset {
		return spec.BlobPutResult{}, callerError(fmt.Sprintf("blob %s: chunk at %d does not follow what was received; start again at 0", req.Digest, req.Offset))
	}
	if int64(buf.Len()+len(req.Data)) > req.Size {
		delete(c.uploads, req.Digest)
		return spec.BlobPutResult{}, callerError(fmt.Sprintf("blob %s: more than its %d bytes", req.Digest, req.Size))
	}
	buf.Write(req.Data)
	if int64(buf.Len()) < req.Size {
		return spec.BlobPutResult{}, nil
	}
	delete(c.uploads, req.Digest)
	if got := spec.ContentDigest(buf.Bytes()); got != req.Digest {
		return spec.BlobPutResult{}, callerError(fmt.Sprintf("blob %s: the bytes received hash to %s", req.Digest, got))
	}
	if err := c.deps.DB.PutBlob(ctx, req.Digest, buf.Bytes()); err != nil {
		return spec.BlobPutResult{}, err
	}
	return spec.BlobPutResult{Complete: true}, nil
}
