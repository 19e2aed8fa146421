package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/safefile"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/statedir"
)

// A machine's service: mesh install copies the running binary to
// PREFIX/bin/mesh and writes a systemd unit that runs this state
// directory's machine (mesh controller or mesh host) with --dir alone. The
// flags it runs with are those D/config.yaml keeps, read at every start: a
// flag written into the unit would override the file at every start and
// make an edit to it vanish. Logs go to stderr, which the journal keeps.
// mesh uninstall removes both and leaves the state directory.

// UnitName is the unit mesh install writes.
const UnitName = "mesh.service"

// UnitDir is where the unit goes, under the root.
const UnitDir = "/etc/systemd/system"

// DefaultPrefix is where the binary goes unless told: PREFIX/bin/mesh.
const DefaultPrefix = "/usr/local"

// installMark starts the unit's line that says mesh install wrote it, and
// what it installed (JSON), which mesh uninstall reads.
const installMark = "# mesh install: "

// Installed is what mesh install put in place, as the unit's mark says.
type Installed struct {
	Mode   string `json:"mode"`   // "controller" or "host"
	Dir    string `json:"dir"`    // the state directory, absolute
	Binary string `json:"binary"` // PREFIX/bin/mesh, as the machine sees it
}

// ServiceError is an install or uninstall that cannot be done as asked:
// the caller's to fix, and nothing was changed.
type ServiceError struct{ msg string }

func (e *ServiceError) Error() string { return e.msg }

func serviceErrorf(format string, args ...any) error {
	return &ServiceError{fmt.Sprintf(format, args...)}
}

// ModeOf is which machine dir is: "controller" (it holds a mesh) or "host"
// (it holds a joined host only).
func ModeOf(dir string) (string, error) {
	ok, err := mesh.IsMesh(statedir.Controller(dir))
	if err != nil {
		return "", err
	}
	if ok {
		return "controller", nil
	}
	_, err = os.Stat(filepath.Join(statedir.Host(dir), host.StateFile))
	if err == nil {
		return "host", nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("look for a joined host in %s: %w", dir, err)
	}
	return "", serviceErrorf("%s holds no mesh and no joined host: run mesh genesis or mesh host --join there first (--dir names the state directory); nothing was installed", dir)
}

// Unit is the systemd unit that runs in's machine.
func Unit(in Installed) (string, error) {
	mark, err := json.Marshal(in)
	if err != nil {
		return "", err
	}
	exec, err := execLine(in.Binary, in.Mode, "--dir", in.Dir)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by mesh install: this machine's mesh %[1]s, whose state directory
# is %[2]s. mesh uninstall removes this file and %[3]s, and
# leaves the state directory.
#
# The flags it runs with are kept in %[4]s, not here (a flag
# given on the command line would override the file at every start): edit
# that file and restart the unit to change one.
%[5]s%[6]s

[Unit]
Description=mesh %[1]s (state directory %[7]s)
Documentation=https://github.com/mesh-fleet/mesh
Wants=network-online.target
After=network-online.target docker.service

[Service]
Type=exec
ExecStart=%[8]s
# Exit 2: a kept flag it cannot use; 3: this node was removed from the
# mesh. Starting it again cannot help either.
Restart=on-failure
RestartSec=2
RestartPreventExitStatus=2 3
# SIGTERM to mesh itself, which stops its parts in order.
KillMode=mixed
TimeoutStopSec=30
# It logs to stderr: the journal keeps it (journalctl -u mesh).
StandardOutput=journal
StandardError=journal
SyslogIdentifier=mesh
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
`, in.Mode, in.Dir, in.Binary, filepath.Join(in.Dir, statedir.ConfigFile), installMark, mark, specifiers(in.Dir), exec)
	return b.String(), nil
}

// execLine is args as an ExecStart= line: each quoted when it must be,
// with systemd's specifiers (%) and variables ($) escaped.
func execLine(args ...string) (string, error) {
	quoted := make([]string, len(args))
	for i, a := range args {
		for _, r := range a {
			if r < 0x20 || r == 0x7f {
				return "", serviceErrorf("%q holds a control character, which a systemd unit cannot carry: use another path", a)
			}
		}
		a = specifiers(a)
		a = strings.ReplaceAll(a, "$", "$$")
		if a == "" || strings.ContainsAny(a, " \t\"'\\;") {
			a = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(a) + `"`
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " "), nil
}

// specifiers is s with systemd's specifier character escaped.
func specifiers(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// Install is what mesh install does, under Root (the machine's own "/",
// or a directory that holds another system's tree).
type Install struct {
	Root   string // absolute
	Prefix string // absolute: the binary goes to Prefix/bin/mesh
	Dir    string // the state directory, absolute
	Self   string // the binary to copy: the running one
}

// InstallResult says what Install did.
type InstallResult struct {
	Installed
	Unit        string // the unit's path, under the root
	BinaryPath  string // the binary's path, under the root
	Copied      bool   // the binary was written (false: it was there already)
	UnitChanged bool   // the unit was written (false: it said the same)
}

// Do copies the binary and writes the unit, refusing (a *ServiceError,
// nothing changed) a state directory that is no machine's, a path the unit
// cannot carry, and a unit there already that mesh install did not write
// or wrote for another state directory.
func (in Install) Do() (InstallResult, error) {
	for _, p := range []struct{ flag, path string }{{"--root", in.Root}, {"--prefix", in.Prefix}, {"--dir", in.Dir}} {
		if !filepath.IsAbs(p.path) {
			return InstallResult{}, serviceErrorf("%s %q is not an absolute path", p.flag, p.path)
		}
	}
	mode, err := ModeOf(in.Dir)
	if err != nil {
		return InstallResult{}, err
	}
	if _, err := statedir.ReadConfig(in.Dir); err != nil {
		return InstallResult{}, fmt.Errorf("%w: the unit would not start; nothing was installed", err)
	}
	res := InstallResult{
		Installed:  Installed{Mode: mode, Dir: in.Dir, Binary: filepath.Join(in.Prefix, "bin", "mesh")},
		Unit:       filepath.Join(in.Root, UnitDir, UnitName),
		BinaryPath: filepath.Join(in.Root, in.Prefix, "bin", "mesh"),
	}
	unit, err := Unit(res.Installed)
	if err != nil {
		return InstallResult{}, err
	}
	old, err := os.ReadFile(res.Unit)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return InstallResult{}, fmt.Errorf("read %s: %w", res.Unit, err)
	default:
		prev, err := installedBy(old)
		if err != nil {
			return InstallResult{}, serviceErrorf("%s exists and %v: remove it yourself, or choose another --root; nothing was installed", res.Unit, err)
		}
		if prev.Dir != in.Dir {
			return InstallResult{}, serviceErrorf("%s runs the mesh %s of %s: mesh uninstall first; nothing was installed", res.Unit, prev.Mode, prev.Dir)
		}
	}
	self, err := os.ReadFile(in.Self)
	if err != nil {
		return InstallResult{}, fmt.Errorf("read the running binary: %w", err)
	}
	if there, err := os.ReadFile(res.BinaryPath); err != nil || !bytes.Equal(there, self) {
		if err := os.MkdirAll(filepath.Dir(res.BinaryPath), 0o755); err != nil {
			return InstallResult{}, fmt.Errorf("install the binary: %w", err)
		}
		// Atomic: a mesh running from the old file keeps its inode.
		if err := safefile.WriteFile(res.BinaryPath, self, 0o755); err != nil {
			return InstallResult{}, fmt.Errorf("install the binary as %s: %w", res.BinaryPath, err)
		}
		res.Copied = true
	}
	if string(old) != unit {
		if err := os.MkdirAll(filepath.Dir(res.Unit), 0o755); err != nil {
			return InstallResult{}, fmt.Errorf("write the unit: %w", err)
		}
		if err := safefile.WriteFile(res.Unit, []byte(unit), 0o644); err != nil {
			return InstallResult{}, fmt.Errorf("write the unit %s: %w", res.Unit, err)
		}
		res.UnitChanged = true
	}
	return res, nil
}

// installedBy reads the mark mesh install leaves in a unit it wrote.
func installedBy(unit []byte) (Installed, error) {
	for _, line := range strings.Split(string(unit), "\n") {
		if rest, ok := strings.CutPrefix(line, installMark); ok {
			var in Installed
			if err := json.Unmarshal([]byte(rest), &in); err != nil || in.Binary == "" || in.Dir == "" {
				return Installed{}, fmt.Errorf("its mesh install mark does not read (%q)", rest)
			}
			return in, nil
		}
	}
	return Installed{}, errors.New("was not written by mesh install")
}

// InstalledAt is what mesh install put under root, as its unit's mark
// says; a unit that is not there, or that mesh install did not write, is
// a *ServiceError.
func InstalledAt(root string) (Installed, error) {
	if !filepath.IsAbs(root) {
		return Installed{}, serviceErrorf("--root %q is not an absolute path", root)
	}
	path := filepath.Join(root, UnitDir, UnitName)
	unit, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Installed{}, serviceErrorf("%s does not exist: mesh is not installed under %s; nothing was removed", path, root)
	}
	if err != nil {
		return Installed{}, fmt.Errorf("read %s: %w", path, err)
	}
	in, err := installedBy(unit)
	if err != nil {
		return Installed{}, serviceErrorf("%s %v: it is not mesh install's to remove; nothing was removed", path, err)
	}
	return in, nil
}

// UninstallResult says what Uninstall removed.
type UninstallResult struct {
	Installed
	Unit       string // the unit's path, under the root
	BinaryPath string // the binary's path, under the root; "" when it was gone already
}

// Uninstall removes the unit mesh install wrote under root and the binary
// it names, leaving the state directory; a unit mesh install did not write
// is refused (a *ServiceError), nothing changed. Disable the unit first.
func Uninstall(root string) (UninstallResult, error) {
	in, err := InstalledAt(root)
	if err != nil {
		return UninstallResult{}, err
	}
	res := UninstallResult{Installed: in, Unit: filepath.Join(root, UnitDir, UnitName)}
	bin := filepath.Join(root, in.Binary)
	if err := os.Remove(bin); err == nil {
		res.BinaryPath = bin
	} else if !errors.Is(err, fs.ErrNotExist) {
		return UninstallResult{}, fmt.Errorf("remove %s: %w", bin, err)
	}
	if err := os.Remove(res.Unit); err != nil {
		return UninstallResult{}, fmt.Errorf("remove %s: %w", res.Unit, err)
	}
	return res, nil
}

// Systemd is how mesh install and uninstall reach systemd about the unit.
type Systemd struct {
	Root string // as Install's
	// Booted says systemd is PID 1 on this machine (sd_booted: the
	// directory /run/systemd/system exists).
	Booted bool
	// Systemctl is the systemctl command (a path, or a name found on PATH).
	Systemctl string
}

// Booted says systemd runs this machine, as sd_booted(3) tells it.
func Booted() bool {
	info, err := os.Stat("/run/systemd/system")
	return err == nil && info.IsDir()
}

// Enable is the systemctl calls that make the unit start at boot: with
// --root for a root other than "/", which systemctl edits offline; on the
// machine itself only when systemd runs it (none otherwise).
func (s Systemd) Enable() [][]string {
	switch {
	case s.Root != "/":
		return [][]string{{"--root=" + s.Root, "enable", UnitName}}
	case s.Booted:
		return [][]string{{"daemon-reload"}, {"enable", UnitName}}
	}
	return nil
}

// Disable is the systemctl calls that stop the unit and keep it from
// starting at boot, made while its file is still there.
func (s Systemd) Disable() [][]string {
	switch {
	case s.Root != "/":
		return [][]string{{"--root=" + s.Root, "disable", UnitName}}
	case s.Booted:
		return [][]string{{"disable", "--now", UnitName}}
	}
	return nil
}

// Forget is the systemctl call that makes systemd read its units again
// once the unit's file is gone.
func (s Systemd) Forget() [][]string {
	if s.Root == "/" && s.Booted {
		return [][]string{{"daemon-reload"}}
	}
	return nil
}

// Run makes calls, stopping at the first that fails.
func (s Systemd) Run(calls [][]string) error {
	for _, args := range calls {
		out, err := exec.Command(s.Systemctl, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
