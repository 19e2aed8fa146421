package spec_test

import (
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestOnChange: a file's on_change names a container of its own module and
// exactly one of a known signal and a restart; anything else is refused,
// naming what is wrong.
func TestOnChange(t *testing.T) {
	t.Parallel()
	manifest := func(onChange string) string {
		return `{"name": "m", "version": "1", "resources": [
			{"file": {"path": "/etc/m/conf", "content": "x", "on_change": ` + onChange + `}},
			{"container": {"name": "files", "image": "i:1"}}]}`
	}
	for _, tc := range []struct {
		name, onChange, refused string
	}{
		{"signal", `{"container": "files", "signal": "SIGHUP"}`, ""},
		{"restart", `{"container": "files", "restart": true}`, ""},
		{"both", `{"container": "files", "signal": "SIGHUP", "restart": true}`, "exactly one of signal and restart"},
		{"neither", `{"container": "files"}`, "exactly one of signal and restart"},
		{"unknown signal", `{"container": "files", "signal": "SIGKILL"}`, `signal "SIGKILL" is not one of SIGHUP`},
		{"another module's container", `{"container": "other", "signal": "SIGHUP"}`, `on_change names container "other", which the module does not declare`},
		{"no container", `{"signal": "SIGHUP"}`, "on_change"},
	} {
		_, err := spec.ParseManifest([]byte(manifest(tc.onChange)))
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %v, want refused saying %q", tc.name, err, tc.refused)
		}
	}
}

// TestProvidedFileOnChange: a provided file's on_change is checked as a
// file's: a container of the provider's module, one signal.
func TestProvidedFileOnChange(t *testing.T) {
	t.Parallel()
	manifest := func(onChange string) string {
		return `{"name": "p", "version": "1", "routes": [{"name": "files", "port": 80}],
			"provides": [{"grant": "files", "route": "files", "file": {"path": "/srv/users", "line": "${consumer}:${credential}", "on_change": ` + onChange + `}}],
			"resources": [{"container": {"name": "files", "image": "i:1"}}]}`
	}
	if _, err := spec.ParseManifest([]byte(manifest(`{"container": "files", "signal": "SIGHUP"}`))); err != nil {
		t.Fatalf("taken: %v", err)
	}
	for onChange, want := range map[string]string{
		`{"container": "other", "signal": "SIGHUP"}`:  `grant files's file: on_change names container "other"`,
		`{"container": "files", "signal": "SIGKILL"}`: `provides[0].file.on_change: signal "SIGKILL"`,
	} {
		if _, err := spec.ParseManifest([]byte(manifest(onChange))); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want refused saying %q", onChange, err, want)
		}
	}
}
