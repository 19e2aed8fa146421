package mesh

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestContentDigestIsTheEncodersBytes: the digest status records with each
// declaration and compares is the SHA-256 of json.NewEncoder's encoding of
// the resources and roster, as it was before the resources were streamed
// into the hash: a store that recorded digests keeps matching.
func TestContentDigestIsTheEncodersBytes(t *testing.T) {
	t.Parallel()
	ctr := spec.Resource{Name: "m:container:web", Kind: spec.KindContainer, Module: "m<&>",
		Spec: &spec.ContainerSpec{Name: "web", Image: "w:1", Env: map[string]string{"A": "<b>\u2028"}}}
	roster := spec.Roster{Nodes: []spec.RosterNode{{Name: "alpha", Address: "10.0.0.1"}}}
	for _, tc := range []struct {
		name      string
		resources []spec.Resource
		roster    spec.Roster
	}{
		{"nothing", nil, spec.Roster{}},
		{"no resources", []spec.Resource{}, roster},
		{"resources", []spec.Resource{resource("/srv/a"), ctr, spec.NodeNetwork("alpha"), resource("/srv/<b>")}, roster},
	} {
		h := sha256.New()
		if err := json.NewEncoder(h).Encode(struct {
			R []spec.Resource
			N spec.Roster
		}{tc.resources, tc.roster}); err != nil {
			t.Fatal(err)
		}
		if got, want := contentDigest(tc.resources, tc.roster), "sha256:"+hex.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("%s: digest %s, want %s", tc.name, got, want)
		}
	}
}
