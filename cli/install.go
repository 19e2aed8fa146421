package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/urfave/cli/v2"
)

func rootFlag() cli.Flag {
	return &cli.StringFlag{Name: "root", Value: "/", Usage: "the system tree to install into: / is this machine; another directory holds another system's tree (an image, a test), which systemctl edits offline"}
}

func installCommand() *cli.Command {
	return &cli.Command{
		Name:  "install",
		Usage: "run this machine's mesh as a systemd service: the binary in PREFIX/bin, a unit for its controller or host",
		Description: `Copies this binary to PREFIX/bin/mesh and writes /etc/systemd/system/mesh.service,
which runs mesh controller (a state directory that holds a mesh) or mesh
host (one that holds a joined host) with --dir D. The flags it runs with are
those D/config.yaml keeps, read at every start: edit that file and restart
the unit to change one. It restarts on failure (not after exit 2, a kept
flag it cannot use, or 3, its node removed), and logs to the journal
(journalctl -u mesh). When systemd runs this machine the unit is enabled;
when it does not, mesh install says how to start mesh instead. Refused,
changing nothing: a state directory that is no machine's, a unit there
already that mesh install did not write or wrote for another state
directory. Run it again after an upgrade: it writes only what differs.

Example:
   mesh install --dir /var/lib/mesh && systemctl start mesh
   mesh install --dir /var/lib/mesh --root /mnt/image --prefix /usr`,
		Flags: []cli.Flag{dirFlag(), rootFlag(),
			&cli.StringFlag{Name: "prefix", Value: daemon.DefaultPrefix, Usage: "the binary goes to PREFIX/bin/mesh"}},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			dir, err := filepath.Abs(c.String("dir"))
			if err != nil {
				return err
			}
			self, err := runningBinary()
			if err != nil {
				return err
			}
			root := c.String("root")
			res, err := daemon.Install{Root: root, Prefix: c.String("prefix"), Dir: dir, Self: self}.Do()
			if err != nil {
				return serviceError(err)
			}
			w := c.App.Writer
			if res.Copied {
				fmt.Fprintf(w, "installed %s (sha256 %s)\n", res.BinaryPath, digestOf(self))
			} else {
				fmt.Fprintf(w, "%s is this binary already\n", res.BinaryPath)
			}
			verb := "wrote"
			if !res.UnitChanged {
				verb = "kept"
			}
			fmt.Fprintf(w, "%s %s: %s %s --dir %s\n", verb, res.Unit, res.Binary, res.Mode, res.Dir)
			fmt.Fprintf(w, "it runs with the flags %s keeps: %s\n", filepath.Join(dir, statedir.ConfigFile), keptFlags(dir))
			sd := daemon.Systemd{Root: root, Booted: daemon.Booted(), Systemctl: "systemctl"}
			calls := sd.Enable()
			if calls == nil {
				fmt.Fprintf(w, "not enabled: systemd does not run this machine (PID 1 is %s); start mesh with %s %s --dir %s, or from the init system\n",
					pid1(), res.Binary, res.Mode, res.Dir)
				return nil
			}
			if err := sd.Run(calls); err != nil {
				return fmt.Errorf("%w; %s is written: enable it with systemctl enable %s", err, res.Unit, daemon.UnitName)
			}
			if root != "/" {
				fmt.Fprintf(w, "enabled %s under %s: it starts when that system boots\n", daemon.UnitName, root)
				return nil
			}
			fmt.Fprintf(w, "enabled %s: it starts at boot; start it now with systemctl start mesh (stop any mesh running on %s first: one process per state directory)\n",
				daemon.UnitName, res.Dir)
			return nil
		},
	}
}

func uninstallCommand() *cli.Command {
	return &cli.Command{
		Name:  "uninstall",
		Usage: "stop running mesh as a systemd service: remove the unit and the binary mesh install wrote",
		Description: `Stops and disables mesh.service (when systemd runs this machine), removes
/etc/systemd/system/mesh.service and the binary it names, and leaves the
state directory as it is: mesh controller --dir D or mesh host --dir D runs
the machine again. A unit mesh install did not write is refused, changing
nothing.

Example:
   mesh uninstall
   mesh uninstall --root /mnt/image`,
		Flags: []cli.Flag{rootFlag()},
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			root := c.String("root")
			if _, err := daemon.InstalledAt(root); err != nil {
				return serviceError(err)
			}
			sd := daemon.Systemd{Root: root, Booted: daemon.Booted(), Systemctl: "systemctl"}
			if err := sd.Run(sd.Disable()); err != nil {
				return fmt.Errorf("%w; nothing was removed", err)
			}
			res, err := daemon.Uninstall(root)
			if err != nil {
				return serviceError(err)
			}
			if err := sd.Run(sd.Forget()); err != nil {
				return err
			}
			w := c.App.Writer
			fmt.Fprintf(w, "removed %s\n", res.Unit)
			if res.BinaryPath != "" {
				fmt.Fprintf(w, "removed %s\n", res.BinaryPath)
			}
			fmt.Fprintf(w, "kept the state directory %s: %s %s --dir %s runs this machine again\n", res.Dir, res.Binary, res.Mode, res.Dir)
			return nil
		},
	}
}

// serviceError is err, a usage error (exit 2) when the call is what is
// wrong.
func serviceError(err error) error {
	var se *daemon.ServiceError
	var ce *statedir.ConfigError
	if errors.As(err, &se) || errors.As(err, &ce) {
		return usageError{err.Error()}
	}
	return err
}

// runningBinary is the path of the running executable, links resolved.
func runningBinary() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the running binary: %w", err)
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return "", fmt.Errorf("find the running binary: %w", err)
	}
	return p, nil
}

func digestOf(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "unknown: " + err.Error()
	}
	return hex.EncodeToString(h.Sum(nil))
}

// keptFlags is what D/config.yaml keeps, flag by flag.
func keptFlags(dir string) string {
	kc, err := statedir.ReadConfig(dir)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, name := range statedir.KeptFlags {
		for _, v := range kc[name] {
			parts = append(parts, "--"+name+"="+v)
		}
	}
	if len(parts) == 0 {
		return "none (the defaults)"
	}
	return strings.Join(parts, " ")
}

// pid1 is the name of this machine's PID 1, as /proc says it.
func pid1() string {
	b, err := os.ReadFile("/proc/1/comm")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}
