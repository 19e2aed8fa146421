package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestControllersAnswerSetsTheExitCode: an error the controller answers
// exits by its kind: the call's own mistake (a name it does not hold, an
// argument it refuses) exits 2, like any command called wrongly; a refusal
// by the mesh's state and the controller's own failure (its store held by
// another writer) exit 1. Each names what is wrong.
func TestControllersAnswerSetsTheExitCode(t *testing.T) {
	t.Parallel()
	// A store write waits 250 ms for a lock, not 5 s: the hold against a
	// locked store below fails as it would, sooner.
	m := newMesh(t, "--store-busy-timeout", "250ms")
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"node", "show", "nosuch"}, 2, `no node called "nosuch": mesh node list shows the nodes`},
		{[]string{"node", "remove", "nosuch"}, 2, `no node called "nosuch"`},
		{[]string{"node", "hold", "nosuch"}, 2, `no node called "nosuch"`},
		{[]string{"module", "show", "nosuch"}, 2, `no module called "nosuch"`},
		{[]string{"module", "remove", "nosuch"}, 2, `no module called "nosuch"`},
		{[]string{"unassign", "nosuch", "alpha"}, 2, `module "nosuch" is not assigned to node "alpha"`},
		{[]string{"token", "revoke", "tnope"}, 2, `no token "tnope"`},
		{[]string{"push", "nosuch"}, 2, `no node called "nosuch"`},
		{[]string{"node", "remove", "alpha"}, 1, "this controller's own machine"},
		{[]string{"token", "create", "alpha"}, 1, `a node called "alpha" is already in the mesh`},
	} {
		args := append([]string{tc.args[0], tc.args[1], "--dir", m.dir}, tc.args[2:]...)
		if tc.args[0] == "unassign" || tc.args[0] == "push" {
			args = append([]string{tc.args[0], "--dir", m.dir}, tc.args[1:]...)
		}
		_, errOut, code := runBinary(t, args...)
		if code != tc.code || !strings.Contains(errOut, tc.says) {
			t.Errorf("mesh %s: exit %d, stderr %q; want exit %d saying %q", strings.Join(tc.args, " "), code, errOut, tc.code, tc.says)
		}
	}
	// A push called wrongly sends nothing: with a change pending on alpha,
	// push --wait -5s exits 2 and the change is still pending after it.
	mustRun(t, "module", "register", "--dir", m.dir, example("motd"))
	mustRun(t, "assign", "--dir", m.dir, "motd", "alpha")
	_, errOut, code := runBinary(t, "push", "--dir", m.dir, "--wait", "-5s")
	if code != 2 || !strings.Contains(errOut, "--wait -5s: a wait is 0 or more; nothing was sent") {
		t.Errorf("mesh push --wait -5s: exit %d, stderr %q; want exit 2, nothing sent", code, errOut)
	}
	if res, _ := statusOf(t, m.dir); len(res.Nodes) != 1 || !res.Nodes[0].Pending {
		t.Errorf("after push --wait -5s alpha's change is no longer pending: %+v", res.Nodes)
	}

	// The controller's own failure: its store is held by another writer.
	release := lockStore(t, filepath.Join(m.dir, "controller", "mesh.db"))
	_, errOut, code = runBinary(t, "node", "hold", "--dir", m.dir, "alpha")
	release()
	if code != 1 || !strings.Contains(errOut, "database is locked") {
		t.Errorf("mesh node hold alpha against a locked store: exit %d, stderr %q; want exit 1 naming the lock", code, errOut)
	}
}
