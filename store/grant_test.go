package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// TestGrantsKeepAndGo: recording a grant again keeps its credential and
// minted time and takes the new provider; rotating replaces it, and a
// grant not held is not found; unassigning the consumer, or removing its
// node, drops its grants.
func TestGrantsKeepAndGo(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, n := range []string{"alpha", "beta"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0.1", NKey: "U" + n, Joined: at}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.RegisterModules(ctx, []spec.Module{{Name: "app", Version: "1"}}, at); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"alpha", "beta"} {
		if err := db.Assign(ctx, "app", n, nil, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutGrants(ctx, []store.Grant{{Module: "app", Node: "alpha", Grant: "files", Provider: "beta", Credential: "c1", MintedAt: at},
		{Module: "app", Node: "beta", Grant: "files", Provider: "beta", Credential: "c2", MintedAt: at}}); err != nil {
		t.Fatal(err)
	}
	if err := db.PutGrants(ctx, []store.Grant{{Module: "app", Node: "alpha", Grant: "files", Provider: "alpha", Credential: "other", MintedAt: at.Add(time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	gs, err := db.Grants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 2 || gs[0].Node != "alpha" || gs[0].Provider != "alpha" || gs[0].Credential != "c1" || !gs[0].MintedAt.Equal(at) {
		t.Fatalf("after recording again: %+v, want alpha's credential and time kept, its provider alpha", gs)
	}
	if err := db.RotateGrants(ctx, "app", "alpha", map[string]string{"files": "c3"}, at.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := db.RotateGrants(ctx, "app", "alpha", map[string]string{"db": "x"}, at); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rotating a grant not held: %v, want not found", err)
	}
	if err := db.Unassign(ctx, "app", "alpha"); err != nil {
		t.Fatal(err)
	}
	if gs, err = db.Grants(ctx); err != nil || len(gs) != 1 || gs[0].Node != "beta" {
		t.Fatalf("after unassigning alpha's consumer: %+v %v, want beta's alone", gs, err)
	}
	if err := db.RemoveNode(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if gs, err = db.Grants(ctx); err != nil || len(gs) != 0 {
		t.Fatalf("after removing beta: %+v %v, want none", gs, err)
	}
}
