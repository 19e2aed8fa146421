package spec_test

import (
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestDirectoryOnRemove: on_remove is keep (the default, however spelled:
// one digest) or delete; anything else is refused where a module is
// registered, by the CLI reading module.json and by the controller
// checking what it was sent, naming the values allowed.
func TestDirectoryOnRemove(t *testing.T) {
	manifest := func(onRemove string) string {
		return `{"name":"d","version":"1","resources":[{"directory":{"path":"/srv/d"` + onRemove + `}}]}`
	}
	resolve := func(t *testing.T, body string) spec.Module {
		t.Helper()
		m, err := spec.ParseManifest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		mod, err := m.Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := mod.Check(); err != nil {
			t.Fatal(err)
		}
		return mod
	}
	none, keep, del := resolve(t, manifest("")), resolve(t, manifest(`,"on_remove":"keep"`)), resolve(t, manifest(`,"on_remove":"delete"`))
	if none.Resources[0].Digest() != keep.Resources[0].Digest() {
		t.Error("on_remove keep spelled out and left out give two digests")
	}
	deleted, _ := spec.As[*spec.DirectorySpec](del.Resources[0])
	if got := deleted.OnRemove; got != spec.OnRemoveDelete {
		t.Errorf("on_remove delete resolves to %q", got)
	}

	_, err := spec.ParseManifest([]byte(manifest(`,"on_remove":"purge"`)))
	for _, part := range []string{"resources[0].directory.on_remove", `"purge"`, "keep", "delete"} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("module.json with on_remove purge: %v, want an error naming %s", err, part)
		}
	}
	deleted.OnRemove = "purge"
	err = del.Check()
	for _, part := range []string{`"d:directory:/srv/d"`, `"purge"`, "keep", "delete"} {
		if err == nil || !strings.Contains(err.Error(), part) {
			t.Errorf("a module sent with on_remove purge: %v, want an error naming %s", err, part)
		}
	}
}
