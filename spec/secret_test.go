package spec_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestSecretOnlyInAFilesContent: a secret setting is taken in a file's
// content, which then defaults to mode 0600 (a mode given is kept), and
// refused anywhere else, naming the field; in a container's environment
// the refusal names the container's secrets and the _FILE convention.
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
		{"env", manifest(`{"container": {"name": "c", "image": "i:1", "env": {"TOKEN": "${token}"}}}`), 0, []string{`resources[0].container.env["TOKEN"]`, "docker inspect", `"secrets": [{"setting": "token", "target": "/run/secrets/token"}]`, "TOKEN_FILE=/run/secrets/token"}},
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

// TestModuleCheckRefusesSecretUse: Module.Check, what the controller
// checks of a module however it was sent, refuses a secret setting where
// ParseManifest does (a path, a container's environment or command, a
// public name), naming the field, and takes one in a file's content.
func TestModuleCheckRefusesSecretUse(t *testing.T) {
	t.Parallel()
	settings := []spec.Setting{{Name: "token", Type: spec.TypeString, Secret: true}}
	module := func(s spec.Spec, routes ...spec.Route) spec.Module {
		return spec.Module{Name: "m", Version: "1", Settings: settings, Routes: routes,
			Resources: spec.Resources{{Name: spec.ResourceName("m", s.Kind(), s.Target()), Kind: s.Kind(), Module: "m", Spec: s}}}
	}
	fileOf := func(path, content string) *spec.FileSpec {
		return &spec.FileSpec{Path: path, Mode: 0o600, Content: []byte(content), Secret: true, Size: int64(len(content)), Digest: spec.ContentDigest([]byte(content))}
	}
	file := fileOf("/etc/t", "${token}")
	for _, tc := range []struct {
		name    string
		module  spec.Module
		refused []string // what the refusal names; none: taken
	}{
		{"content", module(file), nil},
		{"path", module(fileOf("/etc/${token}", "x")), []string{".path", "${token} is a secret setting", "only in a file's content"}},
		{"env", module(&spec.ContainerSpec{Name: "c", Image: "i:1", Env: map[string]string{"TOKEN": "${token}"}}), []string{`env["TOKEN"]`, `"secrets": [{"setting": "token", "target": "/run/secrets/token"}]`, "TOKEN_FILE=/run/secrets/token"}},
		{"command", module(&spec.ContainerSpec{Name: "c", Image: "i:1", Command: []string{"run", "${token}"}}), []string{"command[1]", "only in a file's content"}},
		{"public name", module(file, spec.Route{Name: "r", Port: 80, Public: []string{"${token}.example.org"}}), []string{"public[0]", "${token} is a secret setting"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.module.Check()
			if len(tc.refused) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("taken, want refused")
			}
			for _, want := range tc.refused {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refused with %q, want it to name %q", err, want)
				}
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

// TestContainerSecrets: a container's secret names a declared secret
// setting and a target of its own; a plain setting, an undeclared one, a
// target taken twice or not absolute and clean, a secret in a target, and
// a sealed value or digest written in module.json are each refused, naming
// the field.
func TestContainerSecrets(t *testing.T) {
	t.Parallel()
	const settings = `"settings": [{"name": "token", "type": "string", "secret": true}, {"name": "greeting", "type": "string", "default": "hi"}]`
	manifest := func(secrets string, extra ...string) string {
		return `{"name": "m", "version": "1", ` + settings + `, "resources": [{"container": {"name": "c", "image": "i:1", ` +
			strings.Join(extra, "") + `"secrets": [` + secrets + `]}}]}`
	}
	for _, tc := range []struct {
		name     string
		manifest string
		refused  []string // what the refusal names; none: taken
	}{
		{"taken", manifest(`{"setting": "token", "target": "/run/secrets/token"}`), nil},
		{"twice at two targets", manifest(`{"setting": "token", "target": "/run/secrets/token"}, {"setting": "token", "target": "/etc/token"}`), nil},
		{"plain setting", manifest(`{"setting": "greeting", "target": "/run/secrets/greeting"}`), []string{"resources[0].container.secrets[0].setting", "not a secret setting", "env"}},
		{"no such setting", manifest(`{"setting": "nope", "target": "/run/secrets/nope"}`), []string{"resources[0].container.secrets[0].setting", "names no setting"}},
		{"target twice", manifest(`{"setting": "token", "target": "/run/secrets/t"}, {"setting": "token", "target": "/run/secrets/t"}`), []string{"secrets[1].target", "also the target"}},
		{"target of a mount", manifest(`{"setting": "token", "target": "/data"}`, `"mounts": [{"source": "/srv/data", "target": "/data"}], `), []string{"secrets[0].target", "also the target"}},
		{"target relative", manifest(`{"setting": "token", "target": "run/token"}`), []string{"secrets[0].target", "not absolute"}},
		{"target not clean", manifest(`{"setting": "token", "target": "/run/../token"}`), []string{"secrets[0].target", "not clean"}},
		{"secret in a target", manifest(`{"setting": "token", "target": "/run/${token}"}`), []string{"secrets[0].target", "${token} is a secret setting"}},
		{"sealed written", manifest(`{"setting": "token", "target": "/run/secrets/token", "sealed": "abc"}`), []string{"not written in module.json"}},
		{"digest written", manifest(`{"setting": "token", "target": "/run/secrets/token", "digest": "hmac-sha256:00"}`), []string{"not written in module.json"}},
		{"value written", manifest(`{"setting": "token", "target": "/run/secrets/token", "value": "s3cret"}`), []string{`unknown field "value"`}},
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
			if err := mod.Check(); err != nil {
				t.Fatalf("the module resolved does not check: %v", err)
			}
			c := mod.Resources[0].Spec.(*spec.ContainerSpec)
			if len(c.Secrets) == 0 || c.Secrets[0].Setting != "token" || c.Secrets[0].Target != "/run/secrets/token" || c.Secrets[0].Sealed != "" {
				t.Errorf("secrets %+v, want token at /run/secrets/token, not sealed", c.Secrets)
			}
		})
	}
}

// TestSecretMountCheck: a sealed secret comes with its keyed digest, a
// digest with its sealed value; the value never travels, and a module
// whose container takes a plain or undeclared setting does not check.
func TestSecretMountCheck(t *testing.T) {
	t.Parallel()
	keyed := spec.SealedDigestPrefix + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		m    spec.SecretMount
		ok   bool
	}{
		{"sealed", spec.SecretMount{Setting: "token", Target: "/run/secrets/token", Sealed: "x", Digest: keyed}, true},
		{"not sealed yet", spec.SecretMount{Setting: "token", Target: "/run/secrets/token", Value: "v"}, true},
		{"sealed, no digest", spec.SecretMount{Setting: "token", Target: "/run/secrets/token", Sealed: "x"}, false},
		{"digest, not sealed", spec.SecretMount{Setting: "token", Target: "/run/secrets/token", Digest: keyed}, false},
		{"plain digest", spec.SecretMount{Setting: "token", Target: "/run/secrets/token", Sealed: "x", Digest: spec.ContentDigest([]byte("v"))}, false},
		{"bad setting name", spec.SecretMount{Setting: "Token", Target: "/run/secrets/token"}, false},
	} {
		c := spec.ContainerSpec{Name: "c", Image: "i:1", Secrets: []spec.SecretMount{tc.m}}
		if err := c.Check(); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.name, err, tc.ok)
		}
	}
	c := spec.ContainerSpec{Name: "c", Image: "i:1", Secrets: []spec.SecretMount{{Setting: "token", Target: "/t", Value: "s3cret-value"}}}
	body, err := json.Marshal(c)
	if err != nil || strings.Contains(string(body), "s3cret-value") {
		t.Fatalf("the container as it travels: %s, %v; want no value", body, err)
	}
	for _, st := range []spec.Setting{{Name: "token", Type: spec.TypeString}, {Name: "other", Type: spec.TypeString, Secret: true}} {
		mod := spec.Module{Name: "m", Version: "1", Settings: []spec.Setting{st}, Resources: spec.Resources{{
			Name: spec.ResourceName("m", spec.KindContainer, "c"), Kind: spec.KindContainer, Module: "m", Spec: &c}}}
		if err := mod.Check(); err == nil {
			t.Errorf("a module with setting %+v checks, want its container's secret refused", st)
		}
	}
}
