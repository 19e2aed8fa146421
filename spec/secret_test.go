package spec_test

import (
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestSecretOnlyInAFilesContent: a secret setting is taken in a file's
// content, which then defaults to mode 0600 (a mode given is kept), and
// refused anywhere else, naming the field; in a container's environment
// the refusal names the _FILE convention.
func TestSecretOnlyInAFilesContent(t *testing.T) {
	t.Parallel()
	const settings = `"settings": [{"name": "token", "type": "string", "secret": true}, {"name": "greeting", "type": "string", "default": "hi"}]`
	manifest := func(resources string, extra ...string) string {
		return `{"name": "m", "version": "1", ` + settings + strings.Join(extra, "") + `, "resources": [` + resources + `]}`
	}
	for _, tc := range []struct {
		name     string
		manifest string
		mode     spec.Mode // the file's mode, when taken
		refused  []string  // what the refusal names; none: taken
	}{
		{"content", manifest(`{"file": {"path": "/etc/t", "content": "${token}"}}`), 0o600, nil},
		{"content, mode given", manifest(`{"file": {"path": "/etc/t", "content": "${token}", "mode": "0640"}}`), 0o640, nil},
		{"no secret", manifest(`{"file": {"path": "/etc/t", "content": "${greeting}"}}`), 0o644, nil},
		{"path", manifest(`{"file": {"path": "/etc/${token}", "content": "x"}}`), 0, []string{"resources[0].file.path", "${token} is a secret setting", "only in a file's content"}},
		{"env", manifest(`{"container": {"name": "c", "image": "i:1", "env": {"TOKEN": "${token}"}}}`), 0, []string{`resources[0].container.env["TOKEN"]`, "docker inspect", "TOKEN_FILE=/run/secrets/token"}},
		{"command", manifest(`{"container": {"name": "c", "image": "i:1", "command": ["run", "${token}"]}}`), 0, []string{"resources[0].container.command[1]", "only in a file's content"}},
		{"public name", manifest(`{"file": {"path": "/etc/t", "content": "x"}}`, `, "routes": [{"name": "r", "port": 80, "public": ["${token}.example.org"]}]`), 0, []string{"routes[0].public[0]", "${token} is a secret setting"}},
		{"secret written", manifest(`{"file": {"path": "/etc/t", "content": "x", "secret": true}}`), 0, []string{"are not written in module.json"}},
		{"sealed written", manifest(`{"file": {"path": "/etc/t", "content": "x", "sealed": "abc"}}`), 0, []string{"are not written in module.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := spec.ParseManifest([]byte(tc.manifest))
			if len(tc.refused) > 0 {
				if err == nil {
					t.Fatal("taken, want refused")
				}
				for _, want := range tc.refused {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refused with %q, want it to name %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			mod, err := m.Resolve(func(string) (spec.Content, error) { t.Fatal("no source"); return spec.Content{}, nil })
			if err != nil {
				t.Fatal(err)
			}
			if f := mod.Resources[0].Spec.(*spec.FileSpec); f.Mode != tc.mode {
				t.Errorf("mode %04o, want %04o", f.Mode, tc.mode)
			}
		})
	}
}

// TestSealedFileCheck: a sealed file holds no inline content and no blob,
// is secret, and has a keyed digest; a secret file is never a blob.
func TestSealedFileCheck(t *testing.T) {
	t.Parallel()
	keyed := spec.SealedDigestPrefix + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		f    spec.FileSpec
		ok   bool
	}{
		{"sealed", spec.FileSpec{Path: "/etc/t", Mode: 0o600, Secret: true, Sealed: "x", Size: 3, Digest: keyed}, true},
		{"sealed, not secret", spec.FileSpec{Path: "/etc/t", Mode: 0o600, Sealed: "x", Size: 3, Digest: keyed}, false},
		{"sealed and inline", spec.FileSpec{Path: "/etc/t", Mode: 0o600, Secret: true, Sealed: "x", Content: []byte("abc"), Size: 3, Digest: keyed}, false},
		{"sealed, plain digest", spec.FileSpec{Path: "/etc/t", Mode: 0o600, Secret: true, Sealed: "x", Size: 3, Digest: spec.ContentDigest([]byte("abc"))}, false},
		{"secret blob", spec.FileSpec{Path: "/etc/t", Mode: 0o600, Secret: true, Blob: true, Size: 3, Digest: spec.ContentDigest([]byte("abc"))}, false},
		{"secret, not sealed yet", spec.FileSpec{Path: "/etc/t", Mode: 0o600, Secret: true, Content: []byte("abc"), Size: 3, Digest: spec.ContentDigest([]byte("abc"))}, true},
	} {
		if err := tc.f.Check(); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
