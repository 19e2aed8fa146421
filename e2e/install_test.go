package e2e

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// execStart is the command line the unit under root starts (the tests'
// paths need no quoting), its binary under root.
func execStart(t *testing.T, root string) []string {
	t.Helper()
	unit := readBytes(t, filepath.Join(root, "etc/systemd/system/mesh.service"))
	m := regexp.MustCompile(`(?m)^ExecStart=(.*)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatalf("the unit has no ExecStart:\n%s", unit)
	}
	args := strings.Fields(string(m[1]))
	args[0] = filepath.Join(root, args[0])
	return args
}

// verifyUnit has systemd-analyze verify the unit under root.
func verifyUnit(t *testing.T, root string) {
	t.Helper()
	cmd := exec.Command("systemd-analyze", "verify", "--root="+root, "--recursive-errors=no", "--man=no", "mesh.service")
	cmd.Dir = t.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestInstall: mesh install, on a controller's machine and on a joined
// host's, under a temporary root: the binary copied is this one, the unit
// runs the machine's own command with --dir, systemd-analyze verify
// accepts it, systemctl enabled it (offline, under the root), and the
// command it starts runs the machine again on what it kept. Installing
// again writes nothing; uninstall removes the unit and the binary and
// leaves the state directory as it was.
func TestInstall(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	hostDir, hd := m.join(t, "beta")
	hd.stop(t)
	m.d.stop(t)
	for _, tc := range []struct{ mode, dir string }{{"controller", m.dir}, {"host", hostDir}} {
		root := t.TempDir()
		out := mustRun(t, "install", "--dir", tc.dir, "--root", root)
		bin := filepath.Join(root, "usr/local/bin/mesh")
		for _, want := range []string{
			"installed " + bin + " (sha256 " + fileDigest(t, meshBin) + ")\n",
			"wrote " + filepath.Join(root, "etc/systemd/system/mesh.service") + ": /usr/local/bin/mesh " + tc.mode + " --dir " + tc.dir + "\n",
			"it runs with the flags " + filepath.Join(tc.dir, "config.yaml") + " keeps: --root=",
			"enabled mesh.service under " + root + ": it starts when that system boots\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: mesh install said:\n%s\nwant %q", tc.mode, out, want)
			}
		}
		if fileDigest(t, bin) != fileDigest(t, meshBin) {
			t.Errorf("%s: the installed binary is not this one", tc.mode)
		}
		verifyUnit(t, root)
		if target, err := os.Readlink(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/mesh.service")); err != nil || target != "/etc/systemd/system/mesh.service" {
			t.Errorf("%s: not enabled: %q, %v", tc.mode, target, err)
		}
		args := execStart(t, root)
		if want := []string{bin, tc.mode, "--dir", tc.dir}; strings.Join(args, " ") != strings.Join(want, " ") {
			t.Errorf("%s: ExecStart %q, want %q", tc.mode, args, want)
		}
		if again := mustRun(t, "install", "--dir", tc.dir, "--root", root); !strings.Contains(again, bin+" is this binary already\n") || !strings.Contains(again, "kept ") {
			t.Errorf("%s: installing again said:\n%s", tc.mode, again)
		}
		before := snapshot(t, tc.dir)
		out = mustRun(t, "uninstall", "--root", root)
		if !strings.Contains(out, "removed "+bin+"\n") || !strings.Contains(out, "kept the state directory "+tc.dir) {
			t.Errorf("%s: mesh uninstall said:\n%s", tc.mode, out)
		}
		for p, v := range snapshot(t, root) {
			if !strings.HasPrefix(v, "d") {
				t.Errorf("%s: uninstall left %s (%s)", tc.mode, p, v[:min(len(v), 12)])
			}
		}
		if after := snapshot(t, tc.dir); !maps.Equal(before, after) {
			t.Errorf("%s: uninstall changed the state directory", tc.mode)
		}
	}

	// The controller's unit starts the mesh again, on what it kept.
	root := t.TempDir()
	mustRun(t, "install", "--dir", m.dir, "--root", root)
	args := execStart(t, root)
	d := startBin(t, args[0], args[1:]...)
	if a := waitReady(t, d, m.dir); a.Bus != m.addrs.Bus {
		t.Errorf("the unit's command bound the bus on %s, want the kept %s", a.Bus, m.addrs.Bus)
	}
	d.stop(t)
}
