package spec_test

import (
	"os"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestEdgeValuesAreChecked: an edge whose filled values are not what they
// say is refused by CheckValues, naming the field; a manifest that leaves
// the listeners and the CA out gets their defaults.
func TestEdgeValuesAreChecked(t *testing.T) {
	t.Parallel()
	good := spec.EdgeSpec{Name: "edge", HTTP: ":80", HTTPS: "127.0.0.1:443", ACMECA: spec.EdgeACMECA, Email: "ops@example.org", ACMERoots: "/etc/pebble/root.pem"}
	if err := good.CheckValues(); err != nil {
		t.Fatalf("a good edge: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*spec.EdgeSpec)
		want string
	}{
		{"http with no port", func(e *spec.EdgeSpec) { e.HTTP = "80" }, "http"},
		{"https port out of range", func(e *spec.EdgeSpec) { e.HTTPS = ":70000" }, "https"},
		{"one address for both", func(e *spec.EdgeSpec) { e.HTTPS = ":80" }, "both listen"},
		{"a plain http CA", func(e *spec.EdgeSpec) { e.ACMECA = "http://ca.example.org/dir" }, "acme_ca"},
		{"an email with no @", func(e *spec.EdgeSpec) { e.Email = "ops" }, "email"},
		{"relative roots", func(e *spec.EdgeSpec) { e.ACMERoots = "root.pem" }, "acme_roots"},
		{"no name", func(e *spec.EdgeSpec) { e.Name = "" }, "edge"},
		{"no CA", func(e *spec.EdgeSpec) { e.ACMECA = "" }, "acme_ca"},
	} {
		e := good
		tc.edit(&e)
		if err := e.CheckValues(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	m, err := spec.ParseManifest([]byte(`{"name":"edge","version":"1","resources":[{"edge":{"name":"edge"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := m.Resolve(func(string) (spec.Content, error) { return spec.Content{}, nil })
	if err != nil {
		t.Fatal(err)
	}
	e, ok := spec.As[*spec.EdgeSpec](mod.Resources[0])
	if !ok || e.HTTP != spec.EdgeHTTP || e.HTTPS != spec.EdgeHTTPS || e.ACMECA != spec.EdgeACMECA {
		t.Errorf("an edge left to its defaults: %+v", e)
	}
}

// TestEdgeExampleRegisters: the edge example, whose every field a setting
// fills, passes the module's check (which fills each setting with one
// stand-in, so no check of what the values say may run there).
func TestEdgeExampleRegisters(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile("../examples/edge/module.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := spec.ParseManifest(body)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := m.Resolve(func(string) (spec.Content, error) { return spec.Content{}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := mod.Check(); err != nil {
		t.Fatalf("examples/edge: %v", err)
	}
}
