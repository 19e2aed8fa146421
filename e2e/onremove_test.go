package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestUnassignedDirectoryKeepsOrDeletes: a directory something wrote into
// (as a container writes into its mount) is, once its module is
// unassigned, left in place with what it holds by default, or removed with
// everything in it with on_remove delete; either way the push succeeds,
// the kept one with a note, and status is all clear. An on_remove that is
// neither is refused at register, naming both.
func TestUnassignedDirectoryKeepsOrDeletes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	m := newMesh(t, "--root", root)
	cat := t.TempDir()
	for name, manifest := range map[string]string{
		"data":    `{"name":"data","version":"1","resources":[{"directory":{"path":"/srv/data"}}]}`,
		"scratch": `{"name":"scratch","version":"1","resources":[{"directory":{"path":"/srv/scratch","on_remove":"delete"}}]}`,
	} {
		os.MkdirAll(filepath.Join(cat, name), 0o755)
		os.WriteFile(filepath.Join(cat, name, "module.json"), []byte(manifest), 0o644)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, "module.json"), []byte(`{"name":"bad","version":"1","resources":[{"directory":{"path":"/srv/bad","on_remove":"purge"}}]}`), 0o644)
	_, errOut, code := runMesh(t, "module", "register", "--dir", m.dir, bad)
	want := `resources[0].directory.on_remove: on_remove "purge" is not one of keep (the default) and delete; nothing was registered`
	if code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("register with on_remove purge: exit %d, stderr %q, want it to contain %q", code, errOut, want)
	}

	mustRun(t, "module", "register", "--dir", m.dir, cat)
	mustRun(t, "assign", "--dir", m.dir, "data", "alpha")
	mustRun(t, "assign", "--dir", m.dir, "scratch", "alpha")
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("first push: exit %d %+v", code, o)
	}
	// What nothing declared, written into both.
	os.WriteFile(filepath.Join(root, "srv/data/db"), []byte("rows"), 0o600)
	os.MkdirAll(filepath.Join(root, "srv/scratch/tmp"), 0o755)
	os.WriteFile(filepath.Join(root, "srv/scratch/tmp/x"), []byte("x"), 0o600)

	mustRun(t, "unassign", "--dir", m.dir, "data", "alpha")
	mustRun(t, "unassign", "--dir", m.dir, "scratch", "alpha")
	o, code := pushJSON(t, m.dir)
	if code != 0 || !o.OK {
		t.Fatalf("push after unassign: exit %d %+v", code, o)
	}
	for _, r := range reportOf(t, o, "alpha").Results {
		switch r.Name {
		case "data:directory:/srv/data":
			if r.Outcome != spec.Removed || r.Error != "" || !strings.Contains(r.Note, "left in place with the 1 entry it holds: db;") {
				t.Errorf("the kept directory: %+v, want removed with a note", r)
			}
		case "scratch:directory:/srv/scratch":
			if r.Outcome != spec.Removed || r.Error != "" || r.Note != "" {
				t.Errorf("the deleted directory: %+v, want removed", r)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "srv/data/db")); string(b) != "rows" {
		t.Errorf("the kept directory's entry: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "srv/scratch")); !os.IsNotExist(err) {
		t.Errorf("the deleted directory: %v, want it gone", err)
	}
	var st spec.StatusResult
	out := mustRun(t, "status", "--dir", m.dir, "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("mesh status --json: %v\n%s", err, out)
	}
	if !st.AllClear {
		t.Errorf("status after the push: not all clear: %v", st.Problems)
	}
}
