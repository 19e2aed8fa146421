package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/gobuild"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
)

// TestReleaseRollDelivers: the binary three hosts run (genesis's alpha,
// beta and gamma joined), published and rolled, goes to beta, gamma and
// then alpha, the controller's own, each healthy at once (it reports the
// digest) and delivered over the blob path to D/host/versions/<digest>/mesh,
// whole and 0755, with want naming it. An arm64 build rolled to this amd64
// node is skipped saying why and never delivered. A build beta does not
// come to run halts the roll at the deadline (exit 1, the cause named),
// and an abort has beta want its former version again, keeping the new
// binary. A digest not published and a resume with nothing halted are one
// line each, exit 2. The launcher that runs
// what want names is another part's: this needs none.
func TestReleaseRollDelivers(t *testing.T) {
	optin.NeedSlow(t, "rolls a 45 MiB mesh binary to hosts")
	t.Parallel()
	m := newMesh(t)
	betaDir, _ := m.join(t, "beta")
	gammaDir, _ := m.join(t, "gamma")
	poll.Until(t, 30*time.Second, "every host to report the binaries capability", func() error {
		for _, n := range nodeList(t, m.dir) {
			if n.Facts == nil || !slices.Contains(n.Facts.Capabilities, spec.CapBinaries) {
				return errors.New(n.Name)
			}
		}
		return nil
	})
	digest := fileDigest(t, meshBin)
	mustRun(t, "release", "publish", "--dir", m.dir, meshBin)

	out := mustRun(t, "release", "roll", "--dir", m.dir, digest)
	for _, want := range []string{"roll 1: rolling " + digest + " over beta, gamma, alpha, one at a time, each given 1m0s to report it\n",
		"  alpha: healthy: reports the release", "roll 1 done: 3 healthy on " + digest[:12] + ", 0 skipped\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("roll output does not say %q:\n%s", want, out)
		}
	}
	// Three hosts fetch some 45 MiB each at once over one loopback bus: on
	// a loaded machine that takes tens of seconds.
	for node, dir := range map[string]string{"alpha": m.dir, "beta": betaDir, "gamma": gammaDir} {
		versions := filepath.Join(dir, "host", spec.VersionsDir)
		bin := filepath.Join(versions, digest, spec.VersionBinary)
		poll.Until(t, 2*time.Minute, node+" to deliver its binary", func() error {
			b, err := os.ReadFile(filepath.Join(versions, spec.WantFile))
			if err == nil && string(b) == digest+"\n" {
				return nil
			}
			return errors.New(string(b))
		})
		if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm() != 0o755 || !bytes.Equal(readBytes(t, bin), readBytes(t, meshBin)) {
			t.Errorf("%s: %v %v, want the running binary, 0755", bin, fi, err)
		}
	}
	if status := mustRun(t, "status", "--dir", m.dir); !strings.Contains(status, "roll 1 of "+digest[:12]+": done, 3 of 3 node(s) healthy") {
		t.Errorf("status does not show the roll:\n%s", status)
	}
	versions := filepath.Join(m.dir, "host", spec.VersionsDir)

	arm := builds.Binary(t, gobuild.Build{Dir: builds.Program(t, release.MainPath), GOOS: "linux", GOARCH: "arm64", LDFlags: "-s -w"})
	armDigest := fileDigest(t, arm)
	mustRun(t, "release", "publish", "--dir", m.dir, arm)
	out = mustRun(t, "release", "roll", "--dir", m.dir, "--nodes", "alpha", armDigest)
	if !strings.Contains(out, "  alpha: skipped: arch arm64 release, node is amd64\n") || !strings.Contains(out, "roll 2 done: 0 healthy on "+armDigest[:12]+", 1 skipped") {
		t.Errorf("arm64 roll:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(versions, armDigest)); !os.IsNotExist(err) {
		t.Errorf("the arm64 build reached the amd64 node: %v", err)
	}

	// v2, which beta does not run: the roll halts at the deadline (exit 1,
	// the cause named); beta holds v2 delivered all the same. Abort
	// declares beta's v1 again: want names v1, and v2's binary stays.
	v2 := meshRelease(t, "meshrel-v2")
	d2 := fileDigest(t, v2)
	mustRun(t, "release", "publish", "--dir", m.dir, v2)
	out, errOut, code := runMesh(t, "release", "roll", "--dir", m.dir, "--nodes", "beta", "--healthy-within", "1s", d2)
	if want := "roll 3 halted: beta did not report " + d2[:12] + " within 1s: it reports " + digest[:12]; code != 1 || !strings.Contains(out, want) || errOut != "" {
		t.Errorf("a roll beta misses: exit %d, stdout %q, stderr %q; want exit 1 and %q", code, out, errOut, want)
	}
	betaVersions := filepath.Join(betaDir, "host", spec.VersionsDir)
	poll.Until(t, 2*time.Minute, "beta to hold v2", func() error {
		b, err := os.ReadFile(filepath.Join(betaVersions, spec.WantFile))
		if err == nil && string(b) == d2+"\n" {
			return nil
		}
		return errors.New(string(b))
	})
	out = mustRun(t, "release", "roll", "--dir", m.dir, "--abort")
	if !strings.Contains(out, "roll 3 aborted: 0 healthy (they keep the release), 0 never sent\n  beta: declared the binary it had before the roll: sent declaration") {
		t.Errorf("abort:\n%s", out)
	}
	poll.Until(t, 30*time.Second, "beta to want v1 again", func() error {
		b, err := os.ReadFile(filepath.Join(betaVersions, spec.WantFile))
		if err == nil && string(b) == digest+"\n" {
			return nil
		}
		return errors.New(string(b))
	})
	if !bytes.Equal(readBytes(t, filepath.Join(betaVersions, d2, spec.VersionBinary)), readBytes(t, v2)) {
		t.Error("v2's binary on beta is not whole after the abort")
	}

	never := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"release", "roll", "--dir", m.dir, never}, "mesh: release " + never + " is not published (mesh release list shows what is; mesh release publish FILE adds one); nothing was rolled\n"},
		{[]string{"release", "roll", "--dir", m.dir, "--resume"}, "mesh: no roll is halted or running: nothing to resume; nothing changed\n"},
	} {
		out, errOut, code := runMesh(t, tc.args...)
		if code != 2 || out != "" || errOut != tc.says {
			t.Errorf("mesh %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, out, errOut, tc.says)
		}
	}
}

// TestReleaseRollFollowsThroughARestart: mesh release roll follows its roll
// through a controller that stops and starts again meanwhile (as it does
// when its own node is rolled): it says once that the controller does not
// answer, dials it again, and reports the roll's end; the restarted
// controller carried the roll on (here to its deadline: beta is down).
func TestReleaseRollFollowsThroughARestart(t *testing.T) {
	optin.NeedSlow(t, "rolls a 45 MiB mesh binary through a controller restart")
	t.Parallel()
	m := newMesh(t)
	_, beta := m.join(t, "beta")
	poll.Until(t, 30*time.Second, "beta to report the binaries capability", func() error {
		for _, n := range nodeList(t, m.dir) {
			if n.Name == "beta" && n.Facts != nil && slices.Contains(n.Facts.Capabilities, spec.CapBinaries) {
				return nil
			}
		}
		return errors.New("not yet")
	})
	beta.stop(t)
	v2 := meshRelease(t, "meshrel-v2")
	d2 := fileDigest(t, v2)
	mustRun(t, "release", "publish", "--dir", m.dir, v2)

	cmd := exec.Command(meshBin, "release", "roll", "--dir", m.dir, "--nodes", "beta", "--healthy-within", "15s", d2)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	poll.Until(t, 20*time.Second, "the roll to send beta the release", func() error {
		if strings.Contains(stdout.String(), "beta: sending") {
			return nil
		}
		return errors.New(stdout.String())
	})
	m.d.stop(t)
	d := start(t, "controller", "--dir", m.dir)
	waitReady(t, d, m.dir)

	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("mesh release roll: %v, want exit 1 (halted)", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("mesh release roll still follows after 90 s:\n%s\n%s", stdout.String(), stderr.String())
	}
	if want := "roll 1 halted: beta did not report " + d2[:12] + " within 15s: it reports " + fileDigest(t, meshBin)[:12]; !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout does not say %q:\n%s", want, stdout.String())
	}
	if e := stderr.String(); strings.Count(e, "the controller does not answer") != 1 || strings.Count(e, "\n") != 1 {
		t.Errorf("stderr %q, want one line saying the controller does not answer", e)
	}
}
