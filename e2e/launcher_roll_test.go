package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/gobuild"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
)

// TestRollRunsTheNewVersionAndHaltsAtAFallback: v2 (mesh stamped
// otherwise, -s -w kept) published and rolled over three hosts: each host's
// launcher runs it from versions/<digest>/mesh and each reports its digest;
// rolling it again restarts nothing. A v3 that exits at start halts the
// roll at the first node, whose launcher falls back to v2 and says why in
// its heartbeats; status names the node and the cause; the other nodes
// were never sent v3. Resumed, beta tries v3 once more and falls back
// again; the roll halts again there.
func TestRollRunsTheNewVersionAndHaltsAtAFallback(t *testing.T) {
	optin.NeedSlow(t, "rolls real mesh builds through three launchers and their deadlines")
	t.Parallel()
	m := newMesh(t, "--healthy-within", "20s")
	betaDir, _ := m.join(t, "beta", "--healthy-within", "20s")
	gammaDir, _ := m.join(t, "gamma", "--healthy-within", "20s")
	m.launched(t)
	dirs := map[string]string{"alpha": m.dir, "beta": betaDir, "gamma": gammaDir}
	poll.Until(t, 30*time.Second, "every host to report the binaries capability", func() error {
		for _, n := range nodeList(t, m.dir) {
			if n.Facts == nil || !strings.Contains(strings.Join(n.Facts.Capabilities, ","), spec.CapBinaries) {
				return errors.New(n.Name)
			}
		}
		return nil
	})

	v2 := meshRelease(t, "meshrel-v2")
	d2 := fileDigest(t, v2)
	mustRun(t, "release", "publish", "--dir", m.dir, v2)
	began := time.Now()
	out := mustRun(t, "release", "roll", "--dir", m.dir, d2)
	if !strings.Contains(out, "roll 1 done: 3 healthy on "+d2[:12]) {
		t.Fatalf("the roll of v2:\n%s", out)
	}
	t.Logf("release roll to the third node reporting v2: %s", time.Since(began).Round(time.Millisecond))
	pids := map[string]int{}
	for node, dir := range dirs {
		mode := "host"
		if node == "alpha" {
			mode = "controller"
		}
		var pid int
		poll.Until(t, 30*time.Second, node+" runs v2 from its versions", func() error {
			p, exe := serveChild(t, mode, dir)
			pid = p
			if exe == filepath.Join(dir, "host", spec.VersionsDir, d2, spec.VersionBinary) {
				return nil
			}
			return fmt.Errorf("child %d from %s", p, exe)
		})
		pids[node] = pid
		if n := nodeShow(t, m.dir, node); n.HostVersion != d2 {
			t.Errorf("%s reports %s, want v2 %s", node, n.HostVersion, d2)
		}
	}
	// The same digest again: nothing stands aside, nothing restarts.
	out = mustRun(t, "release", "roll", "--dir", m.dir, d2)
	if !strings.Contains(out, "3 healthy on "+d2[:12]) {
		t.Errorf("the same roll again:\n%s", out)
	}
	for node, dir := range dirs {
		mode := "host"
		if node == "alpha" {
			mode = "controller"
		}
		if p, _ := serveChild(t, mode, dir); p != pids[node] {
			t.Errorf("%s restarted (%d, was %d) for a roll of the digest it runs", node, p, pids[node])
		}
	}

	v3 := builds.Binary(t, gobuild.Build{Dir: builds.Program(t, release.MainPath), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, LDFlags: "-s -w"})
	d3 := fileDigest(t, v3)
	mustRun(t, "release", "publish", "--dir", m.dir, v3)
	out, _, code := runMesh(t, "release", "roll", "--dir", m.dir, d3)
	if code != 1 || !strings.Contains(out, "halted") || !strings.Contains(out, "beta") {
		t.Fatalf("a roll of v3, which exits at start: exit %d:\n%s", code, out)
	}
	if l := launchRecord(t, betaDir); l.Bad[d3].Reason != "exited with status 0 before it was ready" || l.Good != d2 {
		t.Errorf("beta's launcher: %+v", l)
	}
	status, _, _ := runMesh(t, "status", "--dir", m.dir)
	if !strings.Contains(status, "beta") || !strings.Contains(status, d3[:12]) {
		t.Errorf("status does not name beta and v3:\n%s", status)
	}
	for _, node := range []string{"alpha", "gamma"} {
		if _, err := os.Stat(filepath.Join(dirs[node], "host", spec.VersionsDir, d3)); !os.IsNotExist(err) {
			t.Errorf("%s was sent v3: %v", node, err)
		}
	}
	poll.Until(t, 30*time.Second, "beta back on v2", func() error {
		n := nodeShow(t, m.dir, "beta")
		if n.HostVersion == d2 {
			return nil
		}
		return errors.New(n.HostVersion)
	})

	// Resumed: beta is asked to try v3 again (its launcher marked it bad
	// and would not start it otherwise). Its host writes the retry, stands
	// aside, and its launcher runs v3 once more: it exits again, the
	// launcher falls back to v2 again, and the roll halts again at beta.
	out, _, code = runMesh(t, "release", "roll", "--dir", m.dir, "--resume")
	if code != 1 || !strings.Contains(out, "halted") || !strings.Contains(out, "beta fell back from "+d3[:12]) {
		t.Fatalf("the roll of v3 resumed: exit %d:\n%s", code, out)
	}
	if l := launchRecord(t, betaDir); l.Retried[d3] != 1 || l.Bad[d3].Retry != 1 || l.Good != d2 {
		t.Errorf("beta's launcher after the retry: %+v, want v3 retried once and bad again, v2 good", l)
	}
	poll.Until(t, 30*time.Second, "beta back on v2 after the retry", func() error {
		n := nodeShow(t, m.dir, "beta")
		if n.HostVersion == d2 {
			return nil
		}
		return errors.New(n.HostVersion)
	})
	for _, node := range []string{"alpha", "gamma"} {
		if _, err := os.Stat(filepath.Join(dirs[node], "host", spec.VersionsDir, d3)); !os.IsNotExist(err) {
			t.Errorf("%s was sent v3 by the resume: %v", node, err)
		}
	}
}

// TestGenesisHandsOverAtItsFirstSwap: a mesh still run by genesis is
// rolled a new version. Its host stands aside, and genesis execs mesh
// controller in the same process: the launcher runs v2 from its versions
// as its child, the node reports v2, and the roll finishes at the
// controller's own node instead of halting there.
func TestGenesisHandsOverAtItsFirstSwap(t *testing.T) {
	optin.NeedSlow(t, "builds and rolls a second mesh binary through the launcher")
	t.Parallel()
	m := newMesh(t, "--healthy-within", "30s")
	pid := m.d.cmd.Process.Pid
	v2 := meshRelease(t, "meshrel-v2")
	d2 := fileDigest(t, v2)
	mustRun(t, "release", "publish", "--dir", m.dir, v2)
	out := mustRun(t, "release", "roll", "--dir", m.dir, d2)
	if !strings.Contains(out, "roll 1 done: 1 healthy on "+d2[:12]) {
		t.Fatalf("the roll of v2 to genesis's own node:\n%s", out)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "controller\x00--dir\x00"+m.dir) {
		t.Fatalf("genesis's process %d runs %q (%v), want mesh controller --dir %s", pid, cmdline, err, m.dir)
	}
	if _, exe := serveChild(t, "controller", m.dir); exe != filepath.Join(m.dir, "host", spec.VersionsDir, d2, spec.VersionBinary) {
		t.Errorf("the launcher's child runs %q, want v2 from the node's versions", exe)
	}
	if n := nodeShow(t, m.dir, "alpha"); n.HostVersion != d2 {
		t.Errorf("alpha reports %s, want v2 %s", n.HostVersion, d2)
	}
	if !strings.Contains(m.d.out.String(), "handing over to mesh controller") {
		t.Errorf("genesis did not say it hands over:\n%s", m.d.out.String())
	}
}
