package mesh

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// readFailing fails the one read of the gather it is told to.
type readFailing struct {
	Store
	mu   sync.Mutex
	fail string
}

func (r *readFailing) failing(read string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail == read {
		return errors.New("disk I/O error reading " + read)
	}
	return nil
}

func (r *readFailing) Nodes(ctx context.Context) ([]store.Node, error) {
	if err := r.failing("nodes"); err != nil {
		return nil, err
	}
	return r.Store.Nodes(ctx)
}

func (r *readFailing) Modules(ctx context.Context) ([]store.Module, error) {
	if err := r.failing("modules"); err != nil {
		return nil, err
	}
	return r.Store.Modules(ctx)
}

func (r *readFailing) Assignments(ctx context.Context) ([]store.Assignment, error) {
	if err := r.failing("assignments"); err != nil {
		return nil, err
	}
	return r.Store.Assignments(ctx)
}

func (r *readFailing) NodeBinaries(ctx context.Context) (map[string]store.Release, error) {
	if err := r.failing("binaries"); err != nil {
		return nil, err
	}
	return r.Store.NodeBinaries(ctx)
}

func (r *readFailing) Grants(ctx context.Context) ([]store.Grant, error) {
	if err := r.failing("grants"); err != nil {
		return nil, err
	}
	return r.Store.Grants(ctx)
}

func (r *readFailing) Overlay(ctx context.Context) (store.Overlay, error) {
	if err := r.failing("overlay"); err != nil {
		return store.Overlay{}, err
	}
	return r.Store.Overlay(ctx)
}

func (r *readFailing) LastDeclaration(ctx context.Context, node string) (store.Declaration, error) {
	if err := r.failing("last declaration"); err != nil {
		return store.Declaration{}, err
	}
	return r.Store.LastDeclaration(ctx, node)
}

// TestEachGatherReadFailureFailsThePush is invariant 1 for every read of
// a push's gather (the nodes, the modules, the assignments, the binaries,
// the grants, the overlay, and the last declaration whose sealed values are reused):
// one that fails fails the push, naming the read, and nothing is sent to
// any node, so no node loses a name, a grant's line or a credential.
func TestEachGatherReadFailureFailsThePush(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	var rf *readFailing
	c, db := newControllerWith(t, clk, func(db *store.DB) Store { rf = &readFailing{Store: db}; return rf })
	ctx := context.Background()
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "alpha", Settings: map[string]string{"token": "t", "who": "w"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	before, err := db.LastDeclaration(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	for _, read := range []string{"nodes", "modules", "assignments", "binaries", "grants", "overlay", "last declaration"} {
		// A changed value, so that a push would send alpha a declaration,
		// and a sealer that keeps nothing (as after a start), so that the
		// seal reads alpha's last declaration.
		if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "alpha", Settings: map[string]string{"token": "t-" + read, "who": "w"}}); err != nil {
			t.Fatal(err)
		}
		c.composer.sealer.nodes = nil
		rf.mu.Lock()
		rf.fail = read
		rf.mu.Unlock()
		_, err := c.push(ctx, spec.PushRequest{})
		rf.mu.Lock()
		rf.fail = ""
		rf.mu.Unlock()
		if err == nil || !strings.Contains(err.Error(), "disk I/O error reading "+read) {
			t.Errorf("a push with the %s read failing: %v, want it to fail naming the read", read, err)
		}
		after, err := db.LastDeclaration(ctx, "alpha")
		if err != nil || after.Seq != before.Seq {
			t.Errorf("the %s read failing: alpha was sent declaration %d (%v), want none after %d", read, after.Seq, err, before.Seq)
		}
	}
}
