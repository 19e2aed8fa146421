package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mesh-fleet/mesh/statedir"
	"github.com/urfave/cli/v2"
)

// A machine keeps how it was started in D/config.yaml (package statedir
// reads and writes it): a start without a flag takes it from the file; a
// flag given at a start overrides the file, is written back, and the
// change is logged.

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
	if slices.Contains(statedir.ListFlags, name) {
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

// readConfig is statedir.ReadConfig, a file the operator must fix being a
// usage error.
func readConfig(dir string) (statedir.Config, error) {
	kc, err := statedir.ReadConfig(dir)
	var bad *statedir.ConfigError
	if errors.As(err, &bad) {
		return nil, usageError{err.Error()}
	}
	return kc, err
}

// mergeConfig reads D/config.yaml into the command's flags: a flag not
// given takes the file's value. It returns the config to keep (every kept
// flag of the command, as it now stands), the flags given that change the
// file, and whether any value came from the file. It writes nothing: the
// caller checks the result and then writes it.
func mergeConfig(c *cli.Context, dir string) (kc statedir.Config, changes []configChange, fromFile bool, err error) {
	file, err := readConfig(dir)
	if err != nil {
		return nil, nil, false, err
	}
	kc = statedir.Config{}
	for _, name := range statedir.KeptFlags {
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
					return nil, nil, false, usagef("%s: %s %q: %v", filepath.Join(dir, statedir.ConfigFile), name, v, err)
				}
			}
			fromFile = fromFile || len(was) > 0
		}
		kc[name] = flagValues(c, name)
	}
	return kc, changes, fromFile, nil
}

// subnetChanged says whether a start moves --subnet from the file's.
func subnetChanged(changes []configChange) bool {
	return slices.ContainsFunc(changes, func(ch configChange) bool { return ch.flag == "subnet" })
}

// logChanges says which kept flags a start changed.
func logChanges(log *slog.Logger, dir string, changes []configChange) {
	for _, ch := range changes {
		log.Info("flag changed; kept from now on", "flag", "--"+ch.flag, "was", strings.Join(ch.was, ","), "now", strings.Join(ch.now, ","), "file", filepath.Join(dir, statedir.ConfigFile))
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
		return usagef("%s (flags not given come from %s)", u.msg, filepath.Join(dir, statedir.ConfigFile))
	}
	return fmt.Errorf("%w (flags not given come from %s)", err, filepath.Join(dir, statedir.ConfigFile))
}
