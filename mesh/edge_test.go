package mesh

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
)

// edgeModule declares one edge.
func edgeModule() spec.Module {
	return spec.Module{Name: "edge", Version: "1", Resources: []spec.Resource{{
		Name: spec.ResourceName("edge", spec.KindEdge, "edge"), Kind: spec.KindEdge, Module: "edge",
		Spec: &spec.EdgeSpec{Name: "edge", HTTP: spec.EdgeHTTP, HTTPS: spec.EdgeHTTPS, ACMECA: spec.EdgeACMECA}}}}
}

// TestEdgeAssignedNodeGetsTheBucketAndTheKey: the controller makes the
// edges' bucket; a node assigned an edge is given the bucket's permissions
// on the bus at once, and its edge carries the mesh's edge storage key
// sealed to it (kept in the store sealed under the at-rest key, made
// once); a push that changes nothing sends nothing; another node is never
// given the bucket, and the node unassigned loses it at once.
func TestEdgeAssignedNodeGetsTheBucketAndTheKey(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	joinWithKey(t, c, "beta")
	if _, err := c.js.KeyValue(ctx, spec.EdgeBucket); err != nil {
		t.Fatalf("the edges' bucket: %v", err)
	}
	if _, err := db.RegisterModules(ctx, []spec.Module{edgeModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	nkeys := map[string]string{}
	keys, err := db.NodeKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		nkeys[k.Name] = k.NKey
	}
	mayUse := func(node string) bool {
		t.Helper()
		for _, u := range c.deps.Bus.Users() {
			if u.NKey == nkeys[node] {
				return slices.Contains(u.Publish, "$KV."+spec.EdgeBucket+".>")
			}
		}
		t.Fatalf("node %s has no bus user", node)
		return false
	}
	if mayUse("alpha") || mayUse("beta") {
		t.Fatal("a node may use the edges' bucket before any edge is assigned")
	}
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "edge", Node: "alpha"}); err != nil {
		t.Fatal(err)
	}
	if !mayUse("alpha") || mayUse("beta") {
		t.Fatalf("once alpha is assigned the edge: alpha may use the bucket %v, beta %v; want alpha only", mayUse("alpha"), mayUse("beta"))
	}

	push := func() spec.PushNode {
		t.Helper()
		res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}})
		if err != nil || res.Nodes[0].Error != "" {
			t.Fatalf("push: %v %+v", err, res.Nodes)
		}
		return res.Nodes[0]
	}
	edge := func() *spec.EdgeSpec {
		t.Helper()
		for _, r := range lastOnStream(t, c, "alpha").Resources {
			if e, ok := r.Spec.(*spec.EdgeSpec); ok {
				return e
			}
		}
		t.Fatal("alpha's declaration holds no edge")
		return nil
	}
	first := push()
	e := edge()
	raw, err := alphaSealKey.Open(e.StorageKey)
	if err != nil || len(raw) != spec.EdgeStorageKeySize {
		t.Fatalf("alpha's key opens the edge's storage key: %d bytes, %v", len(raw), err)
	}
	kept, err := db.EdgeStorageKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !seal.IsSealedText(kept) || bytes.Contains([]byte(kept), raw) {
		t.Fatal("the store keeps the edge storage key unsealed")
	}
	if opened, err := c.cfg.SealKey.OpenText(kept, edgeKeyPlace); err != nil || opened != string(raw) {
		t.Fatalf("the kept key opens to another key than the edge's (%v)", err)
	}
	if again := push(); !again.Unchanged || again.Seq != first.Seq || edge().StorageKey != e.StorageKey {
		t.Fatalf("a push that changes nothing: %+v, want unchanged at %d, the sealed key reused", again, first.Seq)
	}

	if _, err := c.modules.unassign(ctx, spec.AssignRequest{Module: "edge", Node: "alpha"}); err != nil {
		t.Fatal(err)
	}
	if mayUse("alpha") {
		t.Fatal("alpha may use the edges' bucket once its edge is unassigned")
	}
}
