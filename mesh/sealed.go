package mesh

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// sealedStore is the controller's store with its secret settings sealed
// under the at-rest key (docs/secrets.md): a secret setting's value is
// sealed before it reaches the store, so mesh.db, its write-ahead log and
// every copy of it hold only sealed text, and opened when it is read back
// to compose. A value is sealed when its setting is secret, when its
// module is not known, or when it reads as sealed text already (so that
// text read back is always opened, never taken for a value). Each is bound
// to its module, node and setting: moved to another row, it does not open.
type sealedStore struct {
	Store
	key *seal.RestKey
}

// sealing is db with its secret settings sealed under key; a store sealed
// already is sealed once, under key.
func sealing(db Store, key *seal.RestKey) *sealedStore {
	if s, ok := db.(*sealedStore); ok {
		db = s.Store
	}
	return &sealedStore{Store: db, key: key}
}

// settingPlace is where a setting's value is kept: its sealed text opens
// there only.
func settingPlace(module, node, setting string) string {
	return seal.Place("assignment", module, node, setting)
}

// Assign seals the settings that are secret, then records them.
func (s *sealedStore) Assign(ctx context.Context, module, node string, settings map[string]string, at time.Time) error {
	sealed, err := s.sealSettings(ctx, module, node, settings)
	if err != nil {
		return err
	}
	return s.Store.Assign(ctx, module, node, sealed, at)
}

// Reassign seals the settings given that are secret, then records them;
// the values kept are kept sealed as they are, never opened.
func (s *sealedStore) Reassign(ctx context.Context, module, node string, set map[string]string, unset []string, at time.Time) error {
	sealed, err := s.sealSettings(ctx, module, node, set)
	if err != nil {
		return err
	}
	return s.Store.Reassign(ctx, module, node, sealed, unset, at)
}

// sealSettings is settings, given to module on node, with those that are
// secret sealed.
func (s *sealedStore) sealSettings(ctx context.Context, module, node string, settings map[string]string) (map[string]string, error) {
	secret := func(string) bool { return true } // unless the module says otherwise
	switch m, err := s.Store.Module(ctx, module); {
	case err == nil:
		secret = secretIn(m.Module)
	case !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("assign %s to %s: %w", module, node, err)
	}
	sealed := make(map[string]string, len(settings))
	for name, v := range settings {
		if secret(name) || seal.IsSealedText(v) {
			v = s.key.SealText(v, settingPlace(module, node, name))
		}
		sealed[name] = v
	}
	return sealed, nil
}

// secretIn says which of m's settings are secret: those it declares so.
func secretIn(m spec.Module) func(string) bool {
	return func(name string) bool {
		st, ok := m.Setting(name)
		return ok && st.Secret
	}
}

// RegisterModules registers mods, then seals what they now say is secret
// and an earlier version did not.
func (s *sealedStore) RegisterModules(ctx context.Context, mods []spec.Module, at time.Time) (map[string]string, error) {
	previous, err := s.Store.RegisterModules(ctx, mods, at)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(mods))
	for i, m := range mods {
		names[i] = m.Name
	}
	if _, err := s.sealPlain(ctx, names); err != nil {
		return nil, fmt.Errorf("register modules: %w", err)
	}
	return previous, nil
}

// sealPlain seals every plain value of a secret setting of the modules
// named (every module when none is), in one transaction, and says how
// many assignments it rewrote: the controller runs it at its start, so a
// store written before values were sealed holds no plain secret either.
func (s *sealedStore) sealPlain(ctx context.Context, modules []string) (int, error) {
	return s.Store.RewriteSettings(ctx, modules, func(a store.Assignment, m spec.Module) (map[string]string, bool, error) {
		secret := secretIn(m)
		changed := false
		out := make(map[string]string, len(a.Settings))
		for name, v := range a.Settings {
			if secret(name) && !seal.IsSealedText(v) {
				v, changed = s.key.SealText(v, settingPlace(a.Module, a.Node, name)), true
			}
			out[name] = v
		}
		return out, changed, nil
	})
}

// Assignments is every assignment, its sealed values opened.
func (s *sealedStore) Assignments(ctx context.Context) ([]store.Assignment, error) {
	as, err := s.Store.Assignments(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.open(as); err != nil {
		return nil, fmt.Errorf("read assignments: %w", err)
	}
	return as, nil
}

// AssignmentsOf is node's assignments, their sealed values opened.
func (s *sealedStore) AssignmentsOf(ctx context.Context, node string) ([]store.Assignment, error) {
	as, err := s.Store.AssignmentsOf(ctx, node)
	if err != nil {
		return nil, err
	}
	if err := s.open(as); err != nil {
		return nil, fmt.Errorf("read assignments of node %q: %w", node, err)
	}
	return as, nil
}

// Assignment is module's assignment to node, its sealed values opened.
func (s *sealedStore) Assignment(ctx context.Context, module, node string) (store.Assignment, error) {
	a, err := s.Store.Assignment(ctx, module, node)
	if err != nil {
		return a, err
	}
	as := []store.Assignment{a}
	if err := s.open(as); err != nil {
		return a, fmt.Errorf("read the assignment of %s to %s: %w", module, node, err)
	}
	return as[0], nil
}

// open opens, in place, every sealed value of as. One that does not open
// is an error naming it: the key is not the one that sealed it, or the
// text was changed or moved.
func (s *sealedStore) open(as []store.Assignment) error {
	for i, a := range as {
		var opened map[string]string
		for name, v := range a.Settings {
			if !seal.IsSealedText(v) {
				continue
			}
			plain, err := s.key.OpenText(v, settingPlace(a.Module, a.Node, name))
			if err != nil {
				return fmt.Errorf("setting %q of module %s on node %s: %w (is D/controller/%s the key that sealed it?)", name, a.Module, a.Node, err, SealKeyFile)
			}
			if opened == nil {
				opened = make(map[string]string, len(a.Settings))
				for k, v := range a.Settings {
					opened[k] = v
				}
			}
			opened[name] = plain
		}
		if opened != nil {
			as[i].Settings = opened
		}
	}
	return nil
}

// grantPlace is where a consumer's credential is kept: its sealed text
// opens there only.
func grantPlace(module, node, grant string) string {
	return seal.Place("grant", module, node, grant)
}

// PutGrants seals each credential, then records the grants.
func (s *sealedStore) PutGrants(ctx context.Context, gs []store.Grant) error {
	sealed := make([]store.Grant, len(gs))
	for i, g := range gs {
		g.Credential = s.key.SealText(g.Credential, grantPlace(g.Module, g.Node, g.Grant))
		sealed[i] = g
	}
	return s.Store.PutGrants(ctx, sealed)
}

// RotateGrants seals each new credential, then records it.
func (s *sealedStore) RotateGrants(ctx context.Context, module, node string, credentials map[string]string, at time.Time) error {
	sealed := make(map[string]string, len(credentials))
	for grant, c := range credentials {
		sealed[grant] = s.key.SealText(c, grantPlace(module, node, grant))
	}
	return s.Store.RotateGrants(ctx, module, node, sealed, at)
}

// Grants is every grant, its credential opened. One that does not open
// is an error naming it.
func (s *sealedStore) Grants(ctx context.Context) ([]store.Grant, error) {
	gs, err := s.Store.Grants(ctx)
	if err != nil {
		return nil, err
	}
	for i, g := range gs {
		plain, err := s.key.OpenText(g.Credential, grantPlace(g.Module, g.Node, g.Grant))
		if err != nil {
			return nil, fmt.Errorf("read grants: the credential of %s on %s for grant %q: %w (is D/controller/%s the key that sealed it?)",
				g.Module, g.Node, g.Grant, err, SealKeyFile)
		}
		gs[i].Credential = plain
	}
	return gs, nil
}
