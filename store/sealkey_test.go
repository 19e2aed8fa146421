package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// TestNodeSealKeyKept: a node's sealing public key is kept as enrolled or
// added, read back by every node read, forgotten with the node, and a
// rejoin of the name keeps the new one.
func TestNodeSealKeyKept(t *testing.T) {
	t.Parallel()
	db, _ := openTemp(t)
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := db.AddNode(ctx, store.Node{Name: "alpha", NKey: "UALPHA", SealKey: "x25519:alpha", Joined: now}); err != nil {
		t.Fatal(err)
	}
	if err := db.AddNode(ctx, store.Node{Name: "bare", NKey: "UBARE", Joined: now}); err != nil {
		t.Fatal(err)
	}
	enrol := func(id, key string) {
		t.Helper()
		if err := db.AddToken(ctx, store.Token{ID: id, Node: "beta", EnrolNKey: "U" + id, Created: now, Expires: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := db.Enrol(ctx, id, store.Node{Name: "beta", NKey: "UBETA" + id, SealKey: key, Joined: now}); err != nil {
			t.Fatal(err)
		}
	}
	enrol("t1", "x25519:first")
	want := map[string]string{"alpha": "x25519:alpha", "bare": "", "beta": "x25519:first"}
	check := func() {
		t.Helper()
		for name, key := range want {
			n, err := db.Node(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if n.SealKey != key {
				t.Errorf("Node(%s).SealKey = %q, want %q", name, n.SealKey, key)
			}
		}
		all, err := db.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range all {
			if n.SealKey != want[n.Name] {
				t.Errorf("Nodes: %s's SealKey = %q, want %q", n.Name, n.SealKey, want[n.Name])
			}
		}
		named, err := db.NodesNamed(ctx, []string{"alpha", "beta"})
		if err != nil {
			t.Fatal(err)
		}
		for name, n := range named {
			if n.SealKey != want[name] {
				t.Errorf("NodesNamed: %s's SealKey = %q, want %q", name, n.SealKey, want[name])
			}
		}
	}
	check()

	if err := db.RemoveNode(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Node(ctx, "beta"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Node(beta) after its removal: %v, want ErrNotFound", err)
	}
	enrol("t2", "x25519:second")
	want["beta"] = "x25519:second"
	check()
}
