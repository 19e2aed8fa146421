package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// statusOf runs mesh status --json: the result and whether it exited 0.
func statusOf(t testing.TB, dir string) (spec.StatusResult, bool) {
	t.Helper()
	out, errOut, code := runMesh(t, "status", "--dir", dir, "--json")
	var res spec.StatusResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("mesh status --json: exit %d: %v\n%s%s", code, err, out, errOut)
	}
	return res, code == 0
}

// alive fails the test if d has exited.
func (d *daemon) alive(t testing.TB) {
	t.Helper()
	select {
	case err := <-d.done:
		d.done <- err
		t.Fatalf("mesh exited: %v\n%s", err, d.out.String())
	default:
	}
}

// TestDriftAtStartBeforeAnyPush is the trial run's crash: a controller
// restarted over drift hears its own host's correcting report before any
// push since it started, and must live (the push watchers did not exist
// until a push, and the report's handler panicked the process and the bus).
func TestDriftAtStartBeforeAnyPush(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	m := newMesh(t, "--root", root)
	mustRun(t, "module", "register", "--dir", m.dir, "examples/motd")
	mustRun(t, "assign", "--dir", m.dir, "motd", "alpha")
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("push: exit %d %+v", code, o)
	}
	motd := filepath.Join(root, "etc/motd")
	want, err := os.ReadFile(motd)
	if err != nil {
		t.Fatal(err)
	}
	m.d.stop(t)

	if err := os.WriteFile(motd, []byte("drifted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := start(t, "controller", "--dir", m.dir, "--root", root, "--dns", "127.0.0.1:0", "--dns-upstream", deadUpstream)
	waitReady(t, d, m.dir)
	eventually(t, 20*time.Second, "the drift corrected and reported", func() (bool, string) {
		d.alive(t)
		got, _ := os.ReadFile(motd)
		n := nodeShow(t, m.dir, "alpha")
		if string(got) != string(want) || n.LastReport == nil {
			return false, "motd " + strings.TrimSpace(string(got))
		}
		for _, r := range n.LastReport.Results {
			if r.Name == "motd:file:/etc/motd" && r.Outcome == spec.Changed {
				return true, ""
			}
		}
		return false, "last report has no correction of /etc/motd"
	})
	d.alive(t)
	if n := m.metric(t, "mesh_panics_total"); n != 0 {
		t.Fatalf("mesh_panics_total is %d after the restart:\n%s", n, d.out.String())
	}
	if _, clear := statusOf(t, m.dir); !clear {
		res, _ := statusOf(t, m.dir)
		t.Fatalf("status after the correction is not all-clear: %+v", res)
	}
}
