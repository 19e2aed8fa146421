package spec_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestSetuidWorldWritableIsRefused: a file mode that is setuid or setgid
// and writable by anyone is refused by the manifest parser (at register),
// by a module's check (the controller) and by a resource's check (the
// host); either bit alone is not.
func TestSetuidWorldWritableIsRefused(t *testing.T) {
	for _, tc := range []struct {
		mode string
		ok   bool
	}{
		{"4777", false}, {"2777", false}, {"6776", false}, {"2666", false}, {"4002", false},
		{"4755", true}, {"2775", true}, {"0777", true}, {"1777", true}, {"0666", true},
	} {
		manifest := `{"name": "m", "version": "1", "resources": [{"file": {"path": "/x", "mode": "` + tc.mode + `", "content": "x"}}]}`
		_, err := spec.ParseManifest([]byte(manifest))
		if (err == nil) != tc.ok {
			t.Errorf("mode %s at register: %v, want ok %v", tc.mode, err, tc.ok)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "resources[0].file.mode: mode "+tc.mode+" is setuid or setgid and writable by anyone")) {
			t.Errorf("mode %s: the refusal does not name the field and the rule: %v", tc.mode, err)
		}
		var mode spec.Mode
		if err := json.Unmarshal([]byte(`"`+tc.mode+`"`), &mode); err != nil {
			t.Fatal(err)
		}
		r := spec.Resource{Name: spec.ResourceName("m", spec.KindFile, "/x"), Kind: spec.KindFile, Module: "m",
			Spec: &spec.FileSpec{Path: "/x", Mode: mode, Content: []byte("x"), Size: 1, Digest: spec.ContentDigest([]byte("x"))}}
		if err := r.Check(); (err == nil) != tc.ok {
			t.Errorf("mode %s at the host: %v, want ok %v", tc.mode, err, tc.ok)
		}
		m := spec.Module{Name: "m", Version: "1", Resources: []spec.Resource{r}}
		if err := m.Check(); (err == nil) != tc.ok {
			t.Errorf("mode %s at the controller: %v, want ok %v", tc.mode, err, tc.ok)
		}
	}
}
