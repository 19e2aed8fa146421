package e2e

import (
	"strings"
	"testing"
)

// TestModuleRemove: a module assigned to a node is not removed (exit 1,
// naming the node, the catalogue unchanged); unassigned, it is, and the
// name can be registered again.
func TestModuleRemove(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	mod := fileModule(t, "greeting", "/etc/greeting", "hi\n")
	mustRun(t, "module", "register", "--dir", m.dir, mod)
	mustRun(t, "assign", "--dir", m.dir, "greeting", m.node)

	_, errOut, code := runMesh(t, "module", "remove", "--dir", m.dir, "greeting")
	if code != 1 || !strings.Contains(errOut, `module "greeting" is assigned to `+m.node+": unassign it there and push first") {
		t.Fatalf("remove while assigned: exit %d, stderr %q", code, errOut)
	}
	if out := mustRun(t, "module", "list", "--dir", m.dir); !strings.Contains(out, "greeting") {
		t.Fatalf("a refused removal took the module out of the catalogue:\n%s", out)
	}

	mustRun(t, "unassign", "--dir", m.dir, "greeting", m.node)
	if out := mustRun(t, "module", "remove", "--dir", m.dir, "greeting"); !strings.Contains(out, "removed module greeting 1") {
		t.Fatalf("remove: %q", out)
	}
	if out := mustRun(t, "module", "list", "--dir", m.dir); strings.Contains(out, "greeting") {
		t.Fatalf("the module is still listed after its removal:\n%s", out)
	}
	if _, errOut, code := runMesh(t, "module", "remove", "--dir", m.dir, "greeting"); code != 2 || !strings.Contains(errOut, `no module called "greeting"`) {
		t.Fatalf("remove again: exit %d, stderr %q", code, errOut)
	}
	mustRun(t, "module", "register", "--dir", m.dir, mod)
}
