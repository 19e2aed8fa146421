package mesh

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// TestGrantProviderRegisterKeepsProvides: a version of a provider module
// that no longer provides a grant its consumers hold is refused, naming
// them and how to unassign them, and nothing of the register is
// recorded; a version that still provides it, or one registered once no
// consumer holds the grant from it (an orphaned consumer included), is
// registered.
func TestGrantProviderRegisterKeepsProvides(t *testing.T) {
	t.Parallel()
	c, _ := grantMesh(t, nil)
	ctx := context.Background()
	mustAssign(t, c, spec.AssignRequest{Module: "files", Node: "alpha"})
	mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "beta"})
	mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "gamma"})
	creds := credentials(t, c)

	module := func(j string) spec.Module {
		t.Helper()
		man, err := spec.ParseManifest([]byte(j))
		if err != nil {
			t.Fatal(err)
		}
		m, err := man.Resolve(func(string) (spec.Content, error) { return spec.Content{}, nil })
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	bare := func(version string) spec.Module {
		return module(`{"name":"files","version":"` + version + `","routes":[{"name":"files","port":2049}],"resources":[]}`)
	}
	reader := module(`{"name":"reader","version":"1","resources":[]}`)
	register := func(mods ...spec.Module) error {
		_, err := c.modules.registerModules(ctx, spec.ModuleRegisterRequest{Modules: mods})
		return err
	}
	version := func(name string) string {
		t.Helper()
		m, err := c.modules.db.Module(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return "none"
		}
		if err != nil {
			t.Fatal(err)
		}
		return m.Module.Version
	}

	err := register(reader, bare("2"))
	var refused refusedError
	if !errors.As(err, &refused) {
		t.Fatalf("a provider's version without provides while app-beta and app-gamma hold its grant: %v, want refused", err)
	}
	for _, want := range []string{`module "files" version 2 does not provide grant "files"`, `node "alpha"`, "app-beta, app-gamma",
		"mesh unassign app beta; mesh unassign app gamma", "nothing was registered"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if v, r := version("files"), version("reader"); v != "1" || r != "none" {
		t.Errorf("after the refusal files is version %s and reader %s, want 1 and none", v, r)
	}
	want := "app-beta:" + creds["app-beta"] + "\napp-gamma:" + creds["app-gamma"] + "\n"
	if got := grantFile(t, gatherPlans(t, c)["alpha"], "/srv/store/users"); got != want {
		t.Errorf("after the refusal the provider's file reads %q, want %q", got, want)
	}
	if list, err := c.modules.listGrants(ctx, spec.GrantListRequest{}); err != nil || len(list.Grants) != 2 || list.Grants[0].Orphaned || list.Grants[1].Orphaned {
		t.Errorf("after the refusal grant list %+v %v, want two grants, none orphaned", list, err)
	}

	// A version that keeps provides is registered.
	if err := register(module(strings.Replace(filesManifest, `"version":"1"`, `"version":"2"`, 1))); err != nil {
		t.Fatalf("a provider's version that keeps provides: %v", err)
	}

	// One consumer gone, the refusal names the other alone.
	if _, err := c.modules.unassign(ctx, spec.AssignRequest{Module: "app", Node: "beta"}); err != nil {
		t.Fatal(err)
	}
	err = register(bare("3"))
	if err == nil || !strings.Contains(err.Error(), "to app-gamma:") || strings.Contains(err.Error(), "app-beta") {
		t.Fatalf("with app-gamma alone holding the grant: %v, want refused naming app-gamma alone", err)
	}

	// The provider unassigned with --force, app-gamma is orphaned already:
	// a version without provides orphans no one more.
	if _, err := c.modules.unassign(ctx, spec.AssignRequest{Module: "files", Node: "alpha", Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := register(bare("3")); err != nil {
		t.Fatalf("a version without provides once its consumer is orphaned: %v", err)
	}
	if v := version("files"); v != "3" {
		t.Errorf("files is version %s, want 3", v)
	}
}
