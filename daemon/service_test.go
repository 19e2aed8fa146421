package daemon

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/rogpeppe/go-internal/txtar"
)

var update = flag.Bool("update", false, "rewrite testdata/unit.txtar with the units the code writes")

// verifyUnit has systemd-analyze verify the unit under root, as systemd
// would load it there: its keys and values, its quoting, and that the
// binary its ExecStart names is an executable under root.
func verifyUnit(t *testing.T, root string) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze is not installed: install the systemd package (.ci/run does)")
	}
	// --recursive-errors=no: the root holds no system of its own (no
	// sysinit.target), which is not the unit's fault.
	cmd := exec.Command("systemd-analyze", "verify", "--root="+root, "--recursive-errors=no", "--man=no", UnitName)
	cmd.Dir = t.TempDir() // verify also reads units in the working directory
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify %s under %s: %v\n%s", UnitName, root, err, out)
	}
}

// placeBinary puts an executable at the unit's binary under root.
func placeBinary(t *testing.T, root, binary string) {
	t.Helper()
	b, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, binary)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestUnitGolden holds the units mesh install writes (testdata/unit.txtar;
// -update rewrites it), and systemd-analyze verify accepts each: a
// controller's, and a host's whose paths need quoting and escaping (a
// space, systemd's specifier and variable characters, a quote).
func TestUnitGolden(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   Installed
	}{
		{"controller", Installed{Mode: "controller", Dir: "/var/lib/mesh", Binary: "/usr/local/bin/mesh"}},
		{"host-odd-paths", Installed{Mode: "host", Dir: `/srv/my mesh/100%m $HOME "q"`, Binary: "/opt/mesh tools/bin/mesh"}},
	}
	path := filepath.Join("testdata", "unit.txtar")
	ar, err := txtar.ParseFile(path)
	if err != nil && !(*update && os.IsNotExist(err)) {
		t.Fatal(err)
	}
	if ar == nil {
		ar = &txtar.Archive{Comment: []byte("The units mesh install writes (TestUnitGolden; -update rewrites).\n")}
	}
	want := map[string][]byte{}
	for _, f := range ar.Files {
		want[f.Name] = f.Data
	}
	var files []txtar.File
	for _, tc := range cases {
		unit, err := Unit(tc.in)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		files = append(files, txtar.File{Name: tc.name, Data: []byte(unit)})
		if !*update && string(want[tc.name]) != unit {
			t.Errorf("%s differs from testdata/unit.txtar (rerun with -update if intended):\n--- got\n%s--- want\n%s", tc.name, unit, want[tc.name])
		}
		root := t.TempDir()
		placeBinary(t, root, tc.in.Binary)
		if err := os.MkdirAll(filepath.Join(root, UnitDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, UnitDir, UnitName), []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		verifyUnit(t, root)
		if got, err := installedBy([]byte(unit)); err != nil || got != tc.in {
			t.Errorf("%s: the unit's mark reads %+v, %v; want %+v", tc.name, got, err, tc.in)
		}
	}
	if *update {
		ar.Files = files
		if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Unit(Installed{Mode: "host", Dir: "/srv/a\nb", Binary: "/usr/local/bin/mesh"}); err == nil || !strings.Contains(err.Error(), "control character") {
		t.Errorf("a state directory with a newline: %v, want refused", err)
	}
}

// stateDir makes a state directory that is a controller's machine (it
// holds a mesh) or a host's (it holds a joined host), as ModeOf reads it,
// with a config.yaml.
func stateDir(t *testing.T, mode string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	file := filepath.Join(statedir.Host(dir), host.StateFile)
	if mode == "controller" {
		file = filepath.Join(statedir.Controller(dir), mesh.DBFile)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := statedir.WriteConfig(dir, statedir.Config{"root": {"/"}, "dns": {"127.0.0.1:53"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tree is every file under root and its bytes.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if info.Mode()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			b, err = []byte("-> "+target), nil
		}
		files[strings.TrimPrefix(p, root)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestInstallAndUninstall: install copies the binary (atomically, 0755)
// and writes the unit for the state directory's machine, which systemd
// accepts; again, it writes nothing; uninstall removes both and leaves the
// state directory.
func TestInstallAndUninstall(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"controller", "host"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			root, dir := t.TempDir(), stateDir(t, mode)
			before := tree(t, dir)
			in := Install{Root: root, Prefix: DefaultPrefix, Dir: dir, Self: self}
			res, err := in.Do()
			if err != nil {
				t.Fatal(err)
			}
			if !res.Copied || !res.UnitChanged || res.Mode != mode || res.Binary != "/usr/local/bin/mesh" {
				t.Errorf("install = %+v", res)
			}
			bin := filepath.Join(root, "usr/local/bin/mesh")
			if info, err := os.Stat(bin); err != nil || info.Mode().Perm() != 0o755 || !sameBytes(t, bin, self) {
				t.Errorf("the installed binary: %v, %v; want this binary, 0755", info, err)
			}
			unit, err := os.ReadFile(filepath.Join(root, UnitDir, UnitName))
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := Unit(res.Installed); string(unit) != want || !strings.Contains(want, "ExecStart=/usr/local/bin/mesh "+mode+" --dir "+dir+"\n") {
				t.Errorf("the unit written:\n%s", unit)
			}
			verifyUnit(t, root)

			again, err := in.Do()
			if err != nil || again.Copied || again.UnitChanged {
				t.Errorf("install again = %+v, %v; want nothing written", again, err)
			}
			// Drift: the unit edited by hand, the binary replaced. Install
			// again puts back what it writes.
			unitPath := filepath.Join(root, UnitDir, UnitName)
			os.WriteFile(unitPath, append(bytes.Clone(unit), "Environment=EDITED=1\n"...), 0o644)
			os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
			fixed, err := in.Do()
			if err != nil || !fixed.Copied || !fixed.UnitChanged || !sameBytes(t, bin, self) {
				t.Errorf("install over drift = %+v, %v; want both written again", fixed, err)
			}
			if b, _ := os.ReadFile(unitPath); !bytes.Equal(b, unit) {
				t.Errorf("the unit after install over drift:\n%s", b)
			}

			un, err := Uninstall(root)
			if err != nil {
				t.Fatal(err)
			}
			if un.BinaryPath != bin || un.Dir != dir {
				t.Errorf("uninstall = %+v", un)
			}
			if left := tree(t, root); len(left) != 0 {
				t.Errorf("uninstall left %v under the root", left)
			}
			if after := tree(t, dir); !equalTrees(before, after) {
				t.Errorf("the state directory changed: %v, then %v", before, after)
			}
			if _, err := Uninstall(root); !isServiceError(err) || !strings.Contains(err.Error(), "mesh is not installed under") {
				t.Errorf("uninstall again: %v, want that nothing is installed", err)
			}
		})
	}
}

// TestInstallRefusals: each is refused, naming why, and changes nothing
// under the root.
func TestInstallRefusals(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := stateDir(t, "controller")
	foreignUnit := "[Service]\nExecStart=/usr/bin/something\n"
	for _, tc := range []struct {
		name  string
		unit  string // already under the root, when set
		dir   string
		badCf bool
		says  string
	}{
		{"a directory that is no machine's", "", t.TempDir(), false, "holds no mesh and no joined host"},
		{"a relative state directory", "", "state", false, `--dir "state" is not an absolute path`},
		{"a unit mesh install did not write", foreignUnit, stateDir(t, "host"), false, "was not written by mesh install"},
		{"a unit for another state directory", "mine", stateDir(t, "host"), false, "mesh uninstall first"},
		{"a config.yaml it cannot use", "", stateDir(t, "host"), true, "the unit would not start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.unit == "mine" {
				if _, err := (Install{Root: root, Prefix: DefaultPrefix, Dir: other, Self: self}).Do(); err != nil {
					t.Fatal(err)
				}
			} else if tc.unit != "" {
				os.MkdirAll(filepath.Join(root, UnitDir), 0o755)
				os.WriteFile(filepath.Join(root, UnitDir, UnitName), []byte(tc.unit), 0o644)
			}
			if tc.badCf {
				os.WriteFile(filepath.Join(tc.dir, statedir.ConfigFile), []byte("colour: blue\n"), 0o600)
			}
			before := tree(t, root)
			_, err := Install{Root: root, Prefix: DefaultPrefix, Dir: tc.dir, Self: self}.Do()
			var ce *statedir.ConfigError
			if err == nil || !(isServiceError(err) || errors.As(err, &ce)) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("install = %v, want the caller's mistake saying %q", err, tc.says)
			}
			if after := tree(t, root); !equalTrees(before, after) {
				t.Errorf("the refused install changed the root: %v, then %v", before, after)
			}
		})
	}
	// Uninstall refuses a unit it did not write, and leaves it.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, UnitDir), 0o755)
	os.WriteFile(filepath.Join(root, UnitDir, UnitName), []byte(foreignUnit), 0o644)
	if _, err := Uninstall(root); !isServiceError(err) || !strings.Contains(err.Error(), "not mesh install's to remove") {
		t.Errorf("uninstall of a unit mesh install did not write: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, UnitDir, UnitName)); string(b) != foreignUnit {
		t.Error("uninstall changed a unit it did not write")
	}
}

// TestSystemdCalls: the unit is enabled on this machine only when systemd
// runs it, and under another root offline; it is stopped before its file
// goes, and systemd told after.
func TestSystemdCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sd                      Systemd
		enable, disable, forget [][]string
	}{
		{Systemd{Root: "/", Booted: true}, [][]string{{"daemon-reload"}, {"enable", UnitName}}, [][]string{{"disable", "--now", UnitName}}, [][]string{{"daemon-reload"}}},
		{Systemd{Root: "/", Booted: false}, nil, nil, nil},
		{Systemd{Root: "/mnt/image", Booted: true}, [][]string{{"--root=/mnt/image", "enable", UnitName}}, [][]string{{"--root=/mnt/image", "disable", UnitName}}, nil},
	} {
		eq := func(a, b [][]string) bool { return slices.EqualFunc(a, b, slices.Equal) }
		if !eq(tc.sd.Enable(), tc.enable) || !eq(tc.sd.Disable(), tc.disable) || !eq(tc.sd.Forget(), tc.forget) {
			t.Errorf("%+v: enable %v, disable %v, forget %v; want %v, %v, %v", tc.sd, tc.sd.Enable(), tc.sd.Disable(), tc.sd.Forget(), tc.enable, tc.disable, tc.forget)
		}
	}
}

// TestEnableUnderARoot: systemctl itself enables the unit under a root
// (offline, as for an image) and disables it again.
func TestEnableUnderARoot(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("systemctl"); err != nil {
		t.Fatal("systemctl is not installed: install the systemd package (.ci/run does)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if _, err := (Install{Root: root, Prefix: DefaultPrefix, Dir: stateDir(t, "controller"), Self: self}).Do(); err != nil {
		t.Fatal(err)
	}
	sd := Systemd{Root: root, Systemctl: "systemctl"}
	wants := filepath.Join(root, UnitDir, "multi-user.target.wants", UnitName)
	if err := sd.Run(sd.Enable()); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(wants); err != nil || target != filepath.Join(UnitDir, UnitName) {
		t.Errorf("enabled: %s -> %q, %v", wants, target, err)
	}
	if err := sd.Run(sd.Disable()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(wants); !os.IsNotExist(err) {
		t.Errorf("disabled, %s is still there: %v", wants, err)
	}
}

func isServiceError(err error) bool {
	var se *ServiceError
	return errors.As(err, &se)
}

func sameBytes(t *testing.T, a, b string) bool {
	t.Helper()
	x, err1 := os.ReadFile(a)
	y, err2 := os.ReadFile(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

func equalTrees(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
