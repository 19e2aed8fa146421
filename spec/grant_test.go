package spec_test

import (
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestGrantManifestChecks: a provider's route, line and path, and a
// consumer's settings, are checked at register, each refusal naming its
// field; a well-formed pair parses and resolves to modules the controller
// accepts.
func TestGrantManifestChecks(t *testing.T) {
	t.Parallel()
	provider := func(route, path, line string) string {
		return `{"name":"files","version":"1","routes":[{"name":"files","port":2049}],"provides":[{"grant":"files","route":"` + route +
			`","file":{"path":"` + path + `","line":"` + line + `","mode":"0600"}}],"resources":[]}`
	}
	consumer := func(password string, secret bool, grant string) string {
		s := "false"
		if secret {
			s = "true"
		}
		return `{"name":"app","version":"1","settings":[{"name":"u","type":"string"},{"name":"p","type":"string","secret":` + s +
			`}],"consumes":[{"grant":"` + grant + `","user":"u","password":"` + password + `"}],"resources":[]}`
	}
	for _, ok := range []string{provider("files", "/srv/store/users", "${consumer}:${credential}"), consumer("p", true, "files")} {
		m, err := spec.ParseManifest([]byte(ok))
		if err != nil {
			t.Fatalf("%s: %v", ok, err)
		}
		mod, err := m.Resolve(func(string) (spec.Content, error) { return spec.Content{}, nil })
		if err != nil {
			t.Fatal(err)
		}
		if err := mod.Check(); err != nil {
			t.Fatalf("%s: the controller refuses it: %v", ok, err)
		}
	}
	for _, c := range []struct{ manifest, want string }{
		{provider("web", "/srv/store/users", "${consumer}:${credential}"), `provides[0].route: "web" names no route`},
		{provider("files", "srv/users", "${consumer}:${credential}"), "provides[0].file.path: path \"srv/users\" is not absolute"},
		{provider("files", "/srv/../users", "${consumer}:${credential}"), "provides[0].file.path: path \"/srv/../users\" is not clean"},
		{provider("files", "/srv/users", "${consumer}:${node}"), "provides[0].file.line: ${node}"},
		{provider("files", "/srv/users", "${consumer}"), "provides[0].file.line: no ${credential}"},
		{consumer("p", false, "files"), `consumes[0].password: setting "p" is not secret`},
		{consumer("q", true, "files"), `consumes[0].password: "q" names no setting`},
		{consumer("p", true, "Files_x"), "consumes[0].grant:"},
	} {
		_, err := spec.ParseManifest([]byte(c.manifest))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want it refused saying %q", c.manifest, err, c.want)
		}
	}
}
