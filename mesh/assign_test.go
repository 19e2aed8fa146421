package mesh

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// dirModule is a module declaring one directory at path, serving routes.
func dirModule(name, path string, routes ...spec.Route) spec.Module {
	return spec.Module{Name: name, Version: "1", Routes: routes, Resources: []spec.Resource{{
		Name: spec.ResourceName(name, spec.KindDirectory, path), Kind: spec.KindDirectory, Module: name,
		Spec: &spec.DirectorySpec{Path: path, Mode: 0o755}}}}
}

// TestAssignSaysWhichNodesChange: an assignment or unassignment answers
// with the nodes whose composed declaration it alters: the node alone,
// with routes or without (the roster travels apart: no other node's
// declaration changes), but not a node that did not compose before and
// does not now (nothing is sent to it either way); a node that composes
// again; none for an assignment that changes nothing. When the
// mesh cannot be composed, the change is recorded and the answer says why
// the nodes are not known.
func TestAssignSaysWhichNodesChange(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	fs := &failingStore{node: "beta"}
	c, db := newControllerWith(t, clk, func(db *store.DB) Store { fs.DB = db; return fs })
	ctx := context.Background()
	for _, n := range []string{"beta", "gamma"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "127.0.0.9", NKey: "U" + n, Joined: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	mods := []spec.Module{dirModule("plain", "/srv/plain"), dirModule("routed", "/srv/routed", spec.Route{Name: "web", Port: 80}),
		dirModule("clash1", "/srv/clash"), dirModule("clash2", "/srv/clash")}
	if _, err := db.RegisterModules(ctx, mods, clk.Now()); err != nil {
		t.Fatal(err)
	}
	// gamma's own set does not compose.
	for _, m := range []string{"clash1", "clash2"} {
		if err := db.Assign(ctx, m, "gamma", nil, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		unassign     bool
		module, node string
		want         []string
	}{
		{false, "plain", "alpha", []string{"alpha"}},
		{false, "plain", "alpha", []string{}},
		{false, "routed", "beta", []string{"beta"}},
		{true, "routed", "beta", []string{"beta"}},
		{true, "clash2", "gamma", []string{"gamma"}},
		{false, "routed", "gamma", []string{"gamma"}},
	} {
		req := spec.AssignRequest{Module: tc.module, Node: tc.node}
		do, what := c.modules.assign, "assign"
		if tc.unassign {
			do, what = c.modules.unassign, "unassign"
		}
		res, err := do(ctx, req)
		if err != nil {
			t.Fatalf("%s %s %s: %v", what, tc.module, tc.node, err)
		}
		if !slices.Equal(res.Changed, tc.want) || res.Nodes != 3 || res.Unknown != "" || res.Roster != (tc.module == "routed") {
			t.Errorf("%s %s %s: %+v, want changed %v of 3 nodes", what, tc.module, tc.node, res, tc.want)
		}
	}

	fs.fail.Store(true)
	res, err := c.modules.assign(ctx, spec.AssignRequest{Module: "plain", Node: "beta"})
	if err != nil || len(res.Changed) != 0 || !strings.Contains(res.Unknown, `read assignments of node "beta"`) {
		t.Errorf("assign with the mesh not composing: %+v %v, want the reason the nodes are not known", res, err)
	}
	fs.fail.Store(false)
	as, err := db.AssignmentsOf(ctx, "beta")
	if err != nil || !slices.ContainsFunc(as, func(a store.Assignment) bool { return a.Module == "plain" }) {
		t.Errorf("the assignment made while the mesh did not compose was not recorded: %+v %v", as, err)
	}
}

// noCatalogue is a store whose whole-catalogue read fails: what reads it
// cannot answer.
type noCatalogue struct{ *store.DB }

func (noCatalogue) Modules(context.Context) ([]store.Module, error) {
	return nil, errors.New("the test's store refuses to read every module")
}

// TestAssignReadsOnlyWhatItNeeds: an assign, an unassign and the audit of
// an assign read the module named and the node's own modules, never the
// whole catalogue (a large one would have each assign decode every
// module, twice, with the audit's redaction), a module with routes too:
// it alters the roster, which travels apart, and the node's own
// declaration alone.
func TestAssignReadsOnlyWhatItNeeds(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newControllerWith(t, clk, func(db *store.DB) Store { return noCatalogue{db} })
	ctx := context.Background()
	mods := []spec.Module{dirModule("plain", "/srv/plain"), dirModule("routed", "/srv/routed", spec.Route{Name: "web", Port: 80})}
	x := "x"
	mods[0].Settings = []spec.Setting{{Name: "who", Type: "string", Default: &x}}
	if _, err := db.RegisterModules(ctx, mods, clk.Now()); err != nil {
		t.Fatal(err)
	}
	res, err := c.modules.assign(ctx, spec.AssignRequest{Module: "plain", Node: "alpha", Settings: map[string]string{"who": "me"}})
	if err != nil || !slices.Equal(res.Changed, []string{"alpha"}) || res.Unknown != "" {
		t.Fatalf("assign plain: %+v %v, want alpha changed", res, err)
	}
	if got := assignArgs(c.deps.DB, ctx, mustJSON(t, spec.AssignRequest{Module: "plain", Node: "alpha", Settings: map[string]string{"who": "me"}})); !strings.Contains(got, `"who":"me"`) {
		t.Fatalf("the audit of a setting the module says is not secret: %s", got)
	}
	if res, err := c.modules.unassign(ctx, spec.AssignRequest{Module: "plain", Node: "alpha"}); err != nil || !slices.Equal(res.Changed, []string{"alpha"}) {
		t.Fatalf("unassign plain: %+v %v, want alpha changed", res, err)
	}
	res, err = c.modules.assign(ctx, spec.AssignRequest{Module: "routed", Node: "alpha"})
	if err != nil || !slices.Equal(res.Changed, []string{"alpha"}) || !res.Roster || res.Unknown != "" {
		t.Fatalf("assign routed: %+v %v, want alpha and the roster changed", res, err)
	}
	if as, _ := db.AssignmentsOf(ctx, "alpha"); len(as) != 1 || as[0].Module != "routed" {
		t.Fatalf("assignments of alpha: %+v, want routed recorded", as)
	}
}

// nodeKeyReads counts the reads of every node's name.
type nodeKeyReads struct {
	*store.DB
	n atomic.Int64
}

func (s *nodeKeyReads) NodeKeys(ctx context.Context) ([]store.NodeKey, error) {
	s.n.Add(1)
	return s.DB.NodeKeys(ctx)
}

// TestAssignCountsTheNodes: an assign that changes no route says how many
// nodes a push composes by counting them, without reading every node's
// name (in a large fleet that read would be most of an assign's time), and
// leaves out a node being removed; one that changes a route names them.
func TestAssignCountsTheNodes(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	reads := &nodeKeyReads{}
	c, db := newControllerWith(t, clk, func(db *store.DB) Store { reads.DB = db; return reads })
	ctx := context.Background()
	for _, n := range []string{"beta", "gamma"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0." + n[:1], NKey: "U" + n, Joined: clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.BeginRemoval(ctx, "gamma", clk.Now()); err != nil {
		t.Fatal(err)
	}
	mods := []spec.Module{dirModule("plain", "/srv/plain"), dirModule("routed", "/srv/routed", spec.Route{Name: "web", Port: 80})}
	if _, err := db.RegisterModules(ctx, mods, clk.Now()); err != nil {
		t.Fatal(err)
	}
	before := reads.n.Load()
	res, err := c.modules.assign(ctx, spec.AssignRequest{Module: "plain", Node: "alpha"})
	if err != nil || res.Nodes != 2 || res.Unknown != "" {
		t.Fatalf("assign plain: %+v %v, want 2 nodes composed (alpha, beta)", res, err)
	}
	if n := reads.n.Load() - before; n != 0 {
		t.Fatalf("an assign that changes no route read every node's name %d times", n)
	}
	if res, err = c.modules.assign(ctx, spec.AssignRequest{Module: "routed", Node: "alpha"}); err != nil || res.Nodes != 2 || !res.Roster {
		t.Fatalf("assign routed: %+v %v, want 2 nodes and the roster changed", res, err)
	}
}
