package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
)

// TestNoProcessHoldsTheJoinToken: once a host joined, with --join TOKEN or
// --join-file, no process of the mesh (the controller's, the host's
// launcher the operator started, its child) holds the token's secret in
// its command line or its environment.
func TestNoProcessHoldsTheJoinToken(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	tok := m.token(t, "beta")
	_, h := join(t, tok)
	poll.Until(t, 20*time.Second, "beta heard", func() error {
		return heardAfter(t, m.dir, "beta", time.Time{})
	})

	fileTok := m.token(t, "gamma")
	file := filepath.Join(t.TempDir(), "gamma.token")
	if err := os.WriteFile(file, []byte(fileTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "host")
	g := start(t, "host", "--dir", dir, "--join-file", file, "--address", "127.0.0.2", "--heartbeat", "500ms", "--dns", port(t), "--dns-upstream", deadUpstream, "--docker", "none")
	poll.Until(t, 30*time.Second, "gamma heard", func() error {
		g.alive(t)
		return heardAfter(t, m.dir, "gamma", time.Time{})
	})

	secrets := map[string]string{"beta": mustParse(t, tok).Secret, "gamma": mustParse(t, fileTok).Secret}
	for name, d := range map[string]*daemon{"the controller": m.d, "beta's host": h, "gamma's host": g} {
		procs := processTree(t, d.cmd.Process.Pid)
		if name != "the controller" && len(procs) < 2 {
			t.Errorf("%s: %d process(es), want the launcher and its child", name, len(procs))
		}
		for _, pid := range procs {
			for _, what := range []string{"cmdline", "environ"} {
				body, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), what))
				if err != nil {
					continue // it exited meanwhile
				}
				for node, secret := range secrets {
					if bytes.Contains(body, []byte(secret)) {
						t.Errorf("%s: process %d holds %s's token secret in its %s: %q", name, pid, node, what, bytes.ReplaceAll(body, []byte{0}, []byte{' '}))
					}
				}
				if what == "cmdline" && bytes.Contains(body, []byte("-join")) {
					t.Errorf("%s: process %d runs with a join flag: %q", name, pid, bytes.ReplaceAll(body, []byte{0}, []byte{' '}))
				}
			}
		}
	}
}

// processTree is root and every process descended from it, read from /proc.
func processTree(t *testing.T, root int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		var state string
		var ppid int
		if _, err := fmt.Sscan(rest, &state, &ppid); err == nil {
			children[ppid] = append(children[ppid], pid)
		}
	}
	tree := []int{root}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

// TestJoinIntoAJoinedDirectoryIsCalledWrongly: a join into a directory
// that holds a node exits 2, does nothing (the token stays open), and says
// the way out: a live node is run without --join; a removed one's
// directory is removed, or another --dir given.
func TestJoinIntoAJoinedDirectoryIsCalledWrongly(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	liveDir, live := m.join(t, "beta")
	live.stop(t)
	goneDir, gone := m.join(t, "gamma")
	mustRun(t, "node", "remove", "--dir", m.dir, "gamma")
	if code := gone.exited(t, 30*time.Second); code != 3 {
		t.Fatalf("the removed host exited %d, want 3\n%s", code, gone.out.String())
	}

	for _, tc := range []struct {
		dir, says string
	}{
		{liveDir, fmt.Sprintf("%s holds node %q of mesh %q, joined already: run it without --join (mesh host --dir %s); to join again, remove %s or give --dir a new directory; nothing was done",
			filepath.Join(liveDir, "host"), "beta", "test", liveDir, filepath.Join(liveDir, "host"))},
		{goneDir, fmt.Sprintf("%s holds node %q of mesh %q, removed from the mesh: remove %s or give --dir a new directory, then join again; nothing was done",
			filepath.Join(goneDir, "host"), "gamma", "test", filepath.Join(goneDir, "host"))},
	} {
		tok := m.token(t, "delta")
		_, errOut, code := runMesh(t, "host", "--dir", tc.dir, "--join", tok, "--dns", port(t), "--docker", "none")
		if code != 2 || !strings.Contains(errOut, tc.says) {
			t.Errorf("a join into %s: exit %d, stderr %q; want exit 2 saying %q", tc.dir, code, errOut, tc.says)
		}
		if out, _, _ := runMesh(t, "token", "list", "--dir", m.dir, "--json"); !strings.Contains(out, mustParse(t, tok).ID) {
			t.Errorf("the token of a refused join is not open any more: %s", out)
		}
		mustRun(t, "token", "revoke", "--dir", m.dir, mustParse(t, tok).ID)
	}
}
