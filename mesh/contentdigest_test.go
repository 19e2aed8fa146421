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
// the resources, roster and CA chain (the resources streamed into the
// hash give the same bytes), and without a chain for a declaration that
// carries none: a store that recorded digests keeps matching.
func TestContentDigestIsTheEncodersBytes(t *testing.T) {
	t.Parallel()
	ctr := spec.Resource{Name: "m:container:web", Kind: spec.KindContainer, Module: "m<&>",
		Spec: &spec.ContainerSpec{Name: "web", Image: "w:1", Env: map[string]string{"A": "<b>\u2028"}}}
	roster := spec.Roster{Nodes: []spec.RosterNode{{Name: "alpha", Address: "10.0.0.1"}}}
	for _, tc := range []struct {
		name      string
		resources []spec.Resource
		roster    spec.Roster
		chain     string
	}{
		{"nothing", nil, spec.Roster{}, ""},
		{"no resources", []spec.Resource{}, roster, ""},
		{"resources", []spec.Resource{resource("/srv/a"), ctr, spec.NodeNetwork("alpha"), resource("/srv/<b>")}, roster, ""},
		{"a chain", []spec.Resource{resource("/srv/a")}, roster, "-----BEGIN CERTIFICATE-----\nMIIB<&>\u2028\n-----END CERTIFICATE-----\n"},
	} {
		h := sha256.New()
		if err := json.NewEncoder(h).Encode(struct {
			R []spec.Resource
			N spec.Roster
			C string `json:",omitempty"`
		}{tc.resources, tc.roster, tc.chain}); err != nil {
			t.Fatal(err)
		}
		if got, want := contentDigest(tc.resources, tc.roster, tc.chain), "sha256:"+hex.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("%s: digest %s, want %s", tc.name, got, want)
		}
		// Without a chain: the bytes digests were recorded with before
		// declarations carried one.
		old := sha256.New()
		json.NewEncoder(old).Encode(struct {
			R []spec.Resource
			N spec.Roster
		}{tc.resources, tc.roster})
		if was := "sha256:" + hex.EncodeToString(old.Sum(nil)); contentDigest(tc.resources, tc.roster, "") != was {
			t.Errorf("%s: the digest without a chain is not the one recorded before chains", tc.name)
		}
		if tc.chain != "" && contentDigest(tc.resources, tc.roster, tc.chain) == contentDigest(tc.resources, tc.roster, "") {
			t.Errorf("%s: the chain does not change the digest", tc.name)
		}
	}
}
