package e2e

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

func TestPushApplyAndRemove(t *testing.T) {
	t.Parallel()
	rootA, rootB := t.TempDir(), t.TempDir()
	// alpha logs at debug, so that its idle reconcile passes can be
	// counted (a pass that changes nothing says so at debug).
	m := newMesh(t, "--root", rootA, "--reconcile", "300ms", "--log-level", "debug")
	_, beta := m.join(t, "beta", "--root", rootB, "--reconcile", "300ms")

	// A module whose 5 MiB file travels as a blob.
	big := make([]byte, 5<<20)
	rand.Read(big)
	bigDir := filepath.Join(t.TempDir(), "big")
	os.MkdirAll(bigDir, 0o755)
	os.WriteFile(filepath.Join(bigDir, "big.bin"), big, 0o644)
	os.WriteFile(filepath.Join(bigDir, "module.json"), []byte(`{"name":"big","version":"1","resources":[{"file":{"path":"/opt/big.bin","source":"big.bin","mode":"0600"}}]}`), 0o644)

	mustRun(t, "module", "register", "--dir", m.dir, example("motd"), example("webroot"), example("hello"))
	mustRun(t, "module", "register", "--dir", m.dir, bigDir)
	mustRun(t, "assign", "--dir", m.dir, "motd", "alpha")
	mustRun(t, "assign", "--dir", m.dir, "webroot", "beta")
	mustRun(t, "assign", "--dir", m.dir, "big", "beta")

	o, code := pushJSON(t, m.dir)
	if code != 0 || !o.OK {
		t.Fatalf("first push: exit %d %+v", code, o)
	}
	got := outcomes(o)
	if got["alpha"]["motd:file:/etc/motd"] != spec.Created || got["beta"]["webroot:directory:/srv/www/private"] != spec.Created ||
		got["beta"]["big:file:/opt/big.bin"] != spec.Created || len(got["beta"]) != 7 {
		t.Fatalf("first push outcomes: %v", got)
	}
	if b, _ := os.ReadFile(filepath.Join(rootB, "opt/big.bin")); spec.ContentDigest(b) != spec.ContentDigest(big) {
		t.Fatal("the 5 MiB blob did not arrive intact")
	}
	motd, _ := os.ReadFile(filepath.Join(rootA, "etc/motd"))
	if string(motd) != "Welcome to a machine of the mesh.\n" {
		t.Fatalf("/etc/motd on alpha: %q", motd)
	}
	if info, _ := os.Stat(filepath.Join(rootB, "srv/www/private")); info == nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("/srv/www/private on beta: %v", info)
	}

	// Nothing changed: nothing is sent, and each node's line says so.
	o, code = pushJSON(t, m.dir)
	if code != 0 {
		t.Fatalf("push with nothing changed: exit %d", code)
	}
	for _, n := range o.Nodes {
		if !n.Unchanged || n.Seq != 1 || n.Answered {
			t.Errorf("push with nothing changed, %s: %+v, want unchanged at declaration 1 and no report waited for", n.Node, n.PushNode)
		}
	}
	out, _, code := runMesh(t, "push", "--dir", m.dir, "alpha")
	if code != 0 || !strings.Contains(out, "alpha: unchanged, not sent (declaration 1 holds it") {
		t.Fatalf("push with nothing changed: exit %d\n%s", code, out)
	}

	// The same declaration again, forced: every resource unchanged, zero
	// writes.
	o, code = pushJSON(t, m.dir, "--force")
	if code != 0 {
		t.Fatalf("second push: exit %d", code)
	}
	for _, n := range o.Nodes {
		if n.Report == nil || n.Report.Writes != 0 {
			t.Errorf("second push to %s: report %+v, want zero writes", n.Node, n.Report)
		}
		for name, outcome := range outcomes(o)[n.Node] {
			if outcome != spec.Unchanged {
				t.Errorf("second push: %s %s is %s", n.Node, name, outcome)
			}
		}
	}

	// A reconcile pass that changes nothing says nothing above debug: four
	// of them, counted at debug, and not one line at info or above.
	before := len(m.d.out.String())
	var idle string
	poll.Until(t, 20*time.Second, "four idle reconcile passes on alpha", func() error {
		idle = m.d.out.String()[before:]
		n := strings.Count(idle, `msg="reconcile: nothing to change" component=host`)
		if n >= 4 {
			return nil
		}
		return fmt.Errorf("%d so far", n)
	})
	for _, line := range strings.Split(strings.TrimSpace(idle), "\n") {
		if !strings.Contains(line, " level=DEBUG ") {
			t.Errorf("idle reconcile passes logged above debug: %s", line)
		}
	}

	// A managed file deleted by hand is restored at reconcile, and reported.
	os.Remove(filepath.Join(rootA, "etc/motd"))
	poll.Until(t, 10*time.Second, "/etc/motd restored and reported", func() error {
		n := nodeShow(t, m.dir, "alpha")
		if n.LastReport == nil || !n.LastReport.Reconcile {
			return fmt.Errorf("last report %+v", n.LastReport)
		}
		_, err := os.Stat(filepath.Join(rootA, "etc/motd"))
		if err == nil && n.LastReport.Results[0].Outcome == spec.Created {
			return nil
		}
		return fmt.Errorf("%v %+v", err, n.LastReport.Results)
	})

	// Unassign: what the module declared is gone.
	mustRun(t, "unassign", "--dir", m.dir, "webroot", "beta")
	o, code = pushJSON(t, m.dir, "beta")
	if code != 0 || outcomes(o)["beta"]["webroot:directory:/srv/www"] != spec.Removed {
		t.Fatalf("push after unassign: exit %d %v", code, outcomes(o))
	}
	if _, err := os.Stat(filepath.Join(rootB, "srv/www")); !os.IsNotExist(err) {
		t.Fatalf("/srv/www still on beta after unassign: %v", err)
	}
	if _, err := os.Stat(filepath.Join(rootB, "opt/big.bin")); err != nil {
		t.Fatalf("unassigning webroot took big's file with it: %v", err)
	}

	// A node that does not answer: the wait ends, naming it.
	beta.stop(t)
	out, _, code = runMesh(t, "push", "--dir", m.dir, "--force", "--wait", "2s", "beta")
	if code != 1 || !strings.Contains(out, "no answer within 2s from: beta") {
		t.Fatalf("push to a silent node: exit %d\n%s", code, out)
	}
}

func TestBadManifestRegistersNothing(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	cat := t.TempDir()
	for name, manifest := range map[string]string{
		"good": `{"name":"good","version":"1","resources":[{"file":{"path":"/etc/good","content":"x"}}]}`,
		"bad":  `{"name":"bad","version":"1","resources":[{"file":{"path":"etc/relative","content":"x"}}]}`,
	} {
		os.MkdirAll(filepath.Join(cat, name), 0o755)
		os.WriteFile(filepath.Join(cat, name, "module.json"), []byte(manifest), 0o644)
	}
	_, errOut, code := runMesh(t, "module", "register", "--dir", m.dir, cat)
	want := filepath.Join(cat, "bad", "module.json") + `: resources[0].file.path: path "etc/relative" is not absolute; nothing was registered`
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("exit %d, stderr %q\nwant it to contain %q", code, errOut, want)
	}
	if out := mustRun(t, "module", "list", "--dir", m.dir, "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("modules after a refused registration: %s", out)
	}
}

// TestKilledMidApplyConverges: a host killed with SIGKILL in the middle of
// an apply converges after restart, and never accepts a lower sequence.
func TestKilledMidApplyConverges(t *testing.T) {
	optin.NeedSlow(t, "writes 1,500 files, killed and again")
	t.Parallel()
	rootB := t.TempDir()
	m := newMesh(t)
	hostDir, beta := m.join(t, "beta", "--root", rootB)

	// Many files, so that an apply takes long enough to be cut.
	mod := t.TempDir()
	var res []string
	for i := range 1500 {
		res = append(res, fmt.Sprintf(`{"file":{"path":"/data/f%04d","content":"file %d\n"}}`, i, i))
	}
	os.WriteFile(filepath.Join(mod, "module.json"), []byte(`{"name":"many","version":"1","resources":[`+strings.Join(res, ",")+`]}`), 0o644)
	mustRun(t, "module", "register", "--dir", m.dir, mod)
	mustRun(t, "assign", "--dir", m.dir, "many", "beta")

	statePath := filepath.Join(hostDir, "host", "state.json")
	push := start(t, "push", "--dir", m.dir, "--wait", "60s", "beta")
	_ = push
	var kept struct {
		Seq        uint64 `json:"seq"`
		AppliedSeq uint64 `json:"applied_seq"`
	}
	poll.Until(t, 30*time.Second, "beta kept the declaration", func() error {
		body, _ := os.ReadFile(statePath)
		json.Unmarshal(body, &kept)
		if kept.Seq == 1 {
			return nil
		}
		return fmt.Errorf("kept %d", kept.Seq)
	})
	beta.cmd.Process.Kill()
	<-beta.done
	beta.done <- nil
	entries, _ := os.ReadDir(filepath.Join(rootB, "data"))
	t.Logf("killed with %d of 1500 files written, applied_seq %d", len(entries), kept.AppliedSeq)

	// Restarted, it converges on what it kept: 1,500 files written and
	// synced one by one, which a loaded machine (CI runs the suite at
	// once) has been seen to take past a minute over.
	start(t, "host", "--dir", hostDir, "--root", rootB, "--heartbeat", "500ms", "--dns", port(t), "--dns-upstream", deadUpstream)
	poll.Until(t, 3*time.Minute, "beta converged", func() error {
		entries, _ := os.ReadDir(filepath.Join(rootB, "data"))
		body, _ := os.ReadFile(statePath)
		json.Unmarshal(body, &kept)
		if len(entries) == 1500 && kept.AppliedSeq == 1 {
			return nil
		}
		return fmt.Errorf("%d files, applied %d", len(entries), kept.AppliedSeq)
	})
	// A push with nothing changed sends nothing; forced, it carries a
	// higher sequence, and is applied with no write.
	if o, code := pushJSON(t, m.dir, "beta"); code != 0 || !o.Nodes[0].Unchanged {
		t.Fatalf("push after the restart: exit %d %+v, want unchanged", code, o.Nodes)
	}
	o, code := pushJSON(t, m.dir, "--force", "beta")
	if code != 0 || o.Nodes[0].Seq <= 1 || o.Nodes[0].Report == nil || o.Nodes[0].Report.Writes != 0 {
		t.Fatalf("push after the restart: exit %d %+v", code, o.Nodes)
	}
}

// TestDryRunMatchesPush: a dry run lists exactly what the following push
// reports, and until that push nothing on any host changed.
func TestDryRunMatchesPush(t *testing.T) {
	t.Parallel()
	rootA, rootB := t.TempDir(), t.TempDir()
	m := newMesh(t, "--root", rootA)
	_, _ = m.join(t, "beta", "--root", rootB)
	mustRun(t, "module", "register", "--dir", m.dir, example("motd"), example("webroot"), example("hello"))
	mustRun(t, "assign", "--dir", m.dir, "motd", "alpha")
	mustRun(t, "assign", "--dir", m.dir, "webroot", "beta")
	mustRun(t, "assign", "--dir", m.dir, "motd", "beta")
	if o, code := pushJSON(t, m.dir); code != 0 {
		t.Fatalf("first push: %+v", o)
	}
	// Changes pending on both: one removed, one changed by hand, one added.
	mustRun(t, "unassign", "--dir", m.dir, "motd", "beta")
	os.Chmod(filepath.Join(rootB, "srv/www/private"), 0o755)
	mustRun(t, "assign", "--dir", m.dir, "--set", "token=t", "hello", "alpha")
	beforeA, beforeB := snapshot(t, rootA), snapshot(t, rootB)
	stateBefore := snapshot(t, filepath.Join(m.dir, "host"))

	out, errOut, code := runMesh(t, "push", "--dir", m.dir, "--dry-run")
	if code != 0 || !strings.Contains(out, "+ hello:file:/srv/hello/token") || !strings.Contains(out, "- motd:file:/etc/motd") ||
		!strings.Contains(out, "~ webroot:directory:/srv/www/private") {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, errOut)
	}
	dry, code := pushJSON(t, m.dir, "--dry-run")
	if code != 0 {
		t.Fatalf("dry run --json: %+v", dry)
	}
	if fmt.Sprint(snapshot(t, rootA)) != fmt.Sprint(beforeA) || fmt.Sprint(snapshot(t, rootB)) != fmt.Sprint(beforeB) {
		t.Fatal("a dry run changed a host's files")
	}
	if fmt.Sprint(snapshot(t, filepath.Join(m.dir, "host"))) != fmt.Sprint(stateBefore) {
		t.Fatal("a dry run changed a host's kept state")
	}
	real, code := pushJSON(t, m.dir)
	if code != 0 {
		t.Fatalf("push: %+v", real)
	}
	if d, r := fmt.Sprint(outcomes(dry)), fmt.Sprint(outcomes(real)); d != r {
		t.Fatalf("the dry run said\n%s\nthe push reported\n%s", d, r)
	}
	if len(outcomes(real)["alpha"]) < 4 {
		t.Fatalf("too little compared: %v", outcomes(real))
	}
}
