package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/mesh-fleet/mesh/host"
	"github.com/urfave/cli/v2"
	"gopkg.in/yaml.v3"
)

// A machine keeps how it was started (DESIGN.md): genesis and a join write
// the flags they were given, and the defaults they ran with, to
// D/config.yaml, keyed by flag name. A later start without a flag takes it
// from the file; a flag given at a start overrides the file, is written
// back, and the change is logged. An operator can read and edit the file.
const configFile = "config.yaml"

// keptFlags are the flags D/config.yaml holds, in the file's order; a
// command keeps those of them it has.
var keptFlags = []string{"root", "subnet", "docker", "dns", "dns-upstream", "dns-allow", "reconcile", "heartbeat", "advertise", "log-level"}

// listFlags are the kept flags that may be given more than once.
var listFlags = []string{"dns-upstream", "dns-allow", "advertise"}

// keptConfig is D/config.yaml: each kept flag's values (one for a flag
// that takes one).
type keptConfig map[string][]string

// readConfig reads D/config.yaml; a missing file is an empty config (a
// state directory made before the file existed).
func readConfig(dir string) (keptConfig, error) {
	path := filepath.Join(dir, configFile)
	body, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return keptConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(body, &raw); err != nil {
		return nil, usagef("%s is not YAML: %v (fix or remove it; flags given on the command line write it again)", path, err)
	}
	kc := keptConfig{}
	for key, v := range raw {
		if !slices.Contains(keptFlags, key) {
			return nil, usagef("%s: %q is not a flag mesh keeps (keys: %s)", path, key, strings.Join(keptFlags, ", "))
		}
		switch v := v.(type) {
		case nil:
			kc[key] = nil
		case []any:
			if !slices.Contains(listFlags, key) {
				return nil, usagef("%s: %s takes one value, not a list", path, key)
			}
			for _, e := range v {
				s, ok := scalar(e)
				if !ok {
					return nil, usagef("%s: %s holds %v, not a value", path, key, e)
				}
				kc[key] = append(kc[key], s)
			}
		default:
			s, ok := scalar(v)
			if !ok {
				return nil, usagef("%s: %s holds %v, not a value", path, key, v)
			}
			kc[key] = []string{s}
		}
	}
	return kc, nil
}

func scalar(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case int, int64, uint64, float64, bool:
		return fmt.Sprint(v), true
	}
	return "", false
}

// writeConfig writes D/config.yaml atomically, keys in keptFlags' order.
func writeConfig(dir string, kc keptConfig) error {
	var b strings.Builder
	b.WriteString("# How this machine runs mesh: the flags genesis or the join was given, and\n" +
		"# any given at a start since. A start without a flag takes it from here; a\n" +
		"# flag given on the command line overrides it and is written back. Edit and\n" +
		"# restart to change one.\n")
	for _, key := range keptFlags {
		vals, ok := kc[key]
		if !ok {
			continue
		}
		var v any = vals
		if !slices.Contains(listFlags, key) {
			v = ""
			if len(vals) > 0 {
				v = vals[0]
			}
		} else if vals == nil {
			v = []string{}
		}
		line, err := yaml.Marshal(map[string]any{key: v})
		if err != nil {
			return fmt.Errorf("write %s: %w", configFile, err)
		}
		b.Write(line)
	}
	if err := host.WriteFileAtomic(filepath.Join(dir, configFile), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", configFile, err)
	}
	return nil
}

// hasFlag says whether the running command defines flag name.
func hasFlag(c *cli.Context, name string) bool {
	for _, f := range c.Command.Flags {
		if slices.Contains(f.Names(), name) {
			return true
		}
	}
	return false
}

// flagValues is what flag name holds now, as the file keeps it.
func flagValues(c *cli.Context, name string) []string {
	if slices.Contains(listFlags, name) {
		return slices.Clone(c.StringSlice(name))
	}
	switch v := c.Value(name).(type) {
	case fmt.Stringer:
		return []string{v.String()}
	default:
		return []string{fmt.Sprint(v)}
	}
}

// configChange is a kept flag given at a start with another value than the
// file's.
type configChange struct {
	flag     string
	was, now []string
}

// mergeConfig reads D/config.yaml into the command's flags: a flag not
// given takes the file's value. It returns the config to keep (every kept
// flag of the command, as it now stands), the flags given that change the
// file, and whether any value came from the file. It writes nothing: the
// caller checks the result and then writes it.
func mergeConfig(c *cli.Context, dir string) (kc keptConfig, changes []configChange, fromFile bool, err error) {
	file, err := readConfig(dir)
	if err != nil {
		return nil, nil, false, err
	}
	kc = keptConfig{}
	for _, name := range keptFlags {
		if !hasFlag(c, name) {
			if v, ok := file[name]; ok {
				kc[name] = v // kept for a command that has it
			}
			continue
		}
		was, inFile := file[name]
		if c.IsSet(name) {
			now := flagValues(c, name)
			if inFile && !slices.Equal(was, now) {
				changes = append(changes, configChange{name, was, now})
			}
			kc[name] = now
			continue
		}
		if inFile {
			for _, v := range was {
				if err := c.Set(name, v); err != nil {
					return nil, nil, false, usagef("%s: %s %q: %v", filepath.Join(dir, configFile), name, v, err)
				}
			}
			fromFile = fromFile || len(was) > 0
		}
		kc[name] = flagValues(c, name)
	}
	return kc, changes, fromFile, nil
}

// logChanges says which kept flags a start changed.
func logChanges(log *slog.Logger, dir string, changes []configChange) {
	for _, ch := range changes {
		log.Info("flag changed; kept from now on", "flag", "--"+ch.flag, "was", strings.Join(ch.was, ","), "now", strings.Join(ch.now, ","), "file", filepath.Join(dir, configFile))
	}
}

// fromFileHint is added to a refusal of a flag's value when some values
// came from the file, so the operator knows where to look.
func fromFileHint(err error, fromFile bool, dir string) error {
	if err == nil || !fromFile {
		return err
	}
	var u usageError
	if errors.As(err, &u) {
		return usagef("%s (flags not given come from %s)", u.msg, filepath.Join(dir, configFile))
	}
	return fmt.Errorf("%w (flags not given come from %s)", err, filepath.Join(dir, configFile))
}

// absRoot makes --root absolute, so a start from another directory applies
// under the same one.
func absRoot(c *cli.Context) error {
	root := c.String("root")
	abs, err := filepath.Abs(root)
	if err != nil {
		return usagef("--root %q: %v", root, err)
	}
	if abs != root {
		return c.Set("root", abs)
	}
	return nil
}

// claimDNSFlag checks that --dns can be bound, for UDP and TCP both, before
// anything is written, and turns a port 0 into a free port, so the file
// keeps the port the machine's containers and clients use.
func claimDNSFlag(c *cli.Context) (string, error) {
	bound, err := claimDNSPort(c.String("dns"))
	if err != nil {
		return "", err
	}
	return bound, c.Set("dns", bound)
}

// lockDir takes D/.lock, so that two processes never run on one state
// directory; the lock goes with the process, however it ends.
func lockDir(dir string) (release func(), err error) {
	path := filepath.Join(dir, ".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another mesh process runs on %s (it holds %s): stop it first, or give another --dir", dir, path)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
