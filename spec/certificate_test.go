package spec_test

import (
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestCertificateManifest: module.json declares a certificate by its name
// (settings fill it) and its directory; a name that is not one DNS name, a
// wildcard, a path that is not absolute and clean, an unknown field and a
// directory declared at the certificate's own path are refused where the
// module is read, each naming the field; a module sent with a bad one is
// refused by the controller's check too.
func TestCertificateManifest(t *testing.T) {
	t.Parallel()
	manifest := func(cert string, more ...string) string {
		return `{"name":"web","version":"1","resources":[{"certificate":` + cert + `}` + strings.Join(more, "") + `]}`
	}
	m, err := spec.ParseManifest([]byte(manifest(`{"name":"web.${node}.internal","path":"/srv/web/tls"}`, `,{"directory":{"path":"/srv/web"}}`)))
	if err != nil {
		t.Fatalf("a certificate with its parent directory: %v", err)
	}
	mod, err := m.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mod.Check(); err != nil {
		t.Fatal(err)
	}
	if r := mod.Resources[0]; r.Name != "web:certificate:/srv/web/tls" || r.Kind != spec.KindCertificate || r.Key() != "/srv/web/tls" {
		t.Errorf("resource %s of kind %s keyed %q", r.Name, r.Kind, r.Key())
	}

	for _, tc := range []struct{ name, body, want string }{
		{"no name", manifest(`{"path":"/srv/tls"}`), "resources[0].certificate.name: certificate name is empty"},
		{"one label", manifest(`{"name":"web","path":"/srv/tls"}`), `"web" is not a DNS name`},
		{"upper case", manifest(`{"name":"Web.alpha.internal","path":"/srv/tls"}`), `holds 'W'`},
		{"a wildcard", manifest(`{"name":"*.alpha.internal","path":"/srv/tls"}`), "is a wildcard"},
		{"an empty label", manifest(`{"name":"web..internal","path":"/srv/tls"}`), "label name is empty"},
		{"a relative path", manifest(`{"name":"web.alpha.internal","path":"srv/tls"}`), `resources[0].certificate.path: path "srv/tls" is not absolute`},
		{"a path not clean", manifest(`{"name":"web.alpha.internal","path":"/srv/../tls"}`), "is not clean"},
		{"an unknown field", manifest(`{"name":"web.alpha.internal","path":"/srv/tls","names":["a.b"]}`), `unknown field "names"`},
		{"a directory at its path", manifest(`{"name":"web.alpha.internal","path":"/srv/tls"}`, `,{"directory":{"path":"/srv/tls"}}`), "resources[1].directory.path: /srv/tls is also declared by resources[0]"},
		{"a setting unknown", manifest(`{"name":"web.${host}.internal","path":"/srv/tls"}`), "host"},
	} {
		_, err := spec.ParseManifest([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}

	bad := mod
	bad.Resources = []spec.Resource{{Name: "web:certificate:/srv/tls", Kind: spec.KindCertificate, Module: "web",
		Spec: &spec.CertificateSpec{Name: "*.alpha.internal", Path: "/srv/tls"}}}
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "wildcard") {
		t.Errorf("a module sent with a wildcard certificate: %v", err)
	}
}
