package store_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// TestRewriteSettings: each assignment of the modules named reaches the
// rewrite with its module; the settings it changes are written, the others
// left, and an error writes nothing at all.
func TestRewriteSettings(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, n := range []string{"alpha", "beta"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0.1", NKey: "U" + n, Joined: at}); err != nil {
			t.Fatal(err)
		}
	}
	mods := []spec.Module{{Name: "web", Version: "1", Settings: []spec.Setting{{Name: "token", Type: spec.TypeString, Secret: true}}},
		{Name: "api", Version: "2"}}
	if _, err := db.RegisterModules(ctx, mods, at); err != nil {
		t.Fatal(err)
	}
	for _, a := range []store.Assignment{{Module: "web", Node: "alpha", Settings: map[string]string{"token": "a"}},
		{Module: "web", Node: "beta", Settings: map[string]string{"token": "b"}}, {Module: "api", Node: "alpha"}} {
		if err := db.Assign(ctx, a.Module, a.Node, a.Settings, at); err != nil {
			t.Fatal(err)
		}
	}
	settingsOf := func() map[string]map[string]string {
		as, err := db.Assignments(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]map[string]string{}
		for _, a := range as {
			got[a.Module+"/"+a.Node] = a.Settings
		}
		return got
	}
	before := settingsOf()

	if _, err := db.RewriteSettings(ctx, nil, func(a store.Assignment, m spec.Module) (map[string]string, bool, error) {
		if a.Node == "beta" {
			return nil, false, errors.New("the test's rewrite refuses beta")
		}
		return map[string]string{"token": "changed"}, true, nil
	}); err == nil {
		t.Fatal("a rewrite that failed returned no error")
	}
	if got := settingsOf(); !maps.EqualFunc(got, before, maps.Equal) {
		t.Fatalf("a failed rewrite wrote %v, want %v kept", got, before)
	}

	var seen []string
	n, err := db.RewriteSettings(ctx, []string{"web"}, func(a store.Assignment, m spec.Module) (map[string]string, bool, error) {
		seen = append(seen, a.Module+"/"+a.Node)
		if m.Name != a.Module || len(m.Settings) != 1 || !m.Settings[0].Secret {
			t.Errorf("%s/%s came with module %+v", a.Module, a.Node, m)
		}
		if a.Node == "beta" {
			return nil, false, nil
		}
		return map[string]string{"token": a.Settings["token"] + "!"}, true, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("rewrite: %d written, %v; want 1", n, err)
	}
	if len(seen) != 2 || seen[0] != "web/alpha" || seen[1] != "web/beta" {
		t.Errorf("rewrite saw %v, want web's two assignments", seen)
	}
	got := settingsOf()
	if got["web/alpha"]["token"] != "a!" || got["web/beta"]["token"] != "b" || len(got["api/alpha"]) != 0 {
		t.Errorf("after the rewrite: %v", got)
	}
}
