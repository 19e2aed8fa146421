package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mesh-fleet/mesh/internal/safefile"
	"gopkg.in/yaml.v3"
)

// A machine keeps how it was started (docs/design.md): genesis and a join write
// the flags they were given, and the defaults they ran with, to
// D/config.yaml, keyed by flag name. A later start without a flag takes it
// from the file; a flag given at a start overrides the file, is written
// back, and the change is logged. An operator can read and edit the file.

// KeptFlags are the flags D/config.yaml holds, in the file's order; a
// command keeps those of them it has.
var KeptFlags = []string{"root", "subnet", "docker", "dns", "dns-upstream", "dns-allow", "reconcile", "heartbeat", "cert-renew-check", "endpoint", "relay", "wg-port", "advertise", "cert-lifetime", "log-level", "healthy-within", "cluster"}

// ListFlags are the kept flags that may be given more than once.
var ListFlags = []string{"dns-upstream", "dns-allow", "advertise"}

// Config is D/config.yaml: each kept flag's values (one for a flag that
// takes one).
type Config map[string][]string

// ConfigError is a D/config.yaml that cannot be used as it is: the
// operator's to fix, and nothing was done.
type ConfigError struct{ msg string }

func (e *ConfigError) Error() string { return e.msg }

func configErrorf(format string, args ...any) error {
	return &ConfigError{fmt.Sprintf(format, args...)}
}

// ReadConfig reads D/config.yaml; a missing file is an empty config (a
// state directory made before the file existed). A file that does not
// parse, or holds a key that is no kept flag, is a *ConfigError.
func ReadConfig(dir string) (Config, error) {
	path := filepath.Join(dir, ConfigFile)
	body, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return Config{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(body, &raw); err != nil {
		return nil, configErrorf("%s is not YAML: %v (fix or remove it; flags given on the command line write it again)", path, err)
	}
	kc := Config{}
	for key, v := range raw {
		if !slices.Contains(KeptFlags, key) {
			return nil, configErrorf("%s: %q is not a flag mesh keeps (keys: %s)", path, key, strings.Join(KeptFlags, ", "))
		}
		switch v := v.(type) {
		case nil:
			kc[key] = nil
		case []any:
			if !slices.Contains(ListFlags, key) {
				return nil, configErrorf("%s: %s takes one value, not a list", path, key)
			}
			for _, e := range v {
				s, ok := scalar(e)
				if !ok {
					return nil, configErrorf("%s: %s holds %v, not a value", path, key, e)
				}
				kc[key] = append(kc[key], s)
			}
		default:
			s, ok := scalar(v)
			if !ok {
				return nil, configErrorf("%s: %s holds %v, not a value", path, key, v)
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

// WriteConfig writes D/config.yaml atomically, keys in KeptFlags' order.
func WriteConfig(dir string, kc Config) error {
	var b strings.Builder
	b.WriteString("# How this machine runs mesh: the flags genesis or the join was given, and\n" +
		"# any given at a start since. A start without a flag takes it from here; a\n" +
		"# flag given on the command line overrides it and is written back. Edit and\n" +
		"# restart to change one.\n")
	for _, key := range KeptFlags {
		vals, ok := kc[key]
		if !ok {
			continue
		}
		var v any = vals
		if !slices.Contains(ListFlags, key) {
			v = ""
			if len(vals) > 0 {
				v = vals[0]
			}
		} else if vals == nil {
			v = []string{}
		}
		line, err := yaml.Marshal(map[string]any{key: v})
		if err != nil {
			return fmt.Errorf("write %s: %w", ConfigFile, err)
		}
		b.Write(line)
	}
	if err := safefile.WriteFile(filepath.Join(dir, ConfigFile), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", ConfigFile, err)
	}
	return nil
}
