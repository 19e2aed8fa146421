package spec_test

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestCheckCADomain: each domain an operator may not declare is refused
// naming the rule it breaks.
func TestCheckCADomain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		domain string
		want   string // "" when taken
	}{
		{"example.org", ""},
		{"mesh.example.co.uk", ""},
		{"internal", "the mesh's own names"},
		{".internal", "the mesh's own names"},
		{"internal.", "the mesh's own names"},
		{"alpha.internal", "the mesh's own names"},
		{"web.alpha.internal", "the mesh's own names"},
		{".example.org", "leading dot"},
		{"example.org.", "trailing dot"},
		{"org", "not a domain name"},
		{"mesh-bus", "not a domain name"},
		{"", "not a domain name"},
		{"Example.org", "use only a-z"},
		{"exa mple.org", "use only a-z"},
		{"*.example.org", "use only a-z"},
		{"-x.example.org", "begins or ends with '-'"},
		{"a..example.org", "empty"},
		{strings.Repeat("a", 64) + ".org", "at most 63"},
	} {
		err := spec.CheckCADomain(tc.domain)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q refused: %v", tc.domain, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want a refusal saying %q", tc.domain, err, tc.want)
		}
	}
}

// TestCSRRequestDER: a CSR is taken as PEM or DER; a PEM block of another
// type, a second block or nothing at all is refused.
func TestCSRRequestDER(t *testing.T) {
	t.Parallel()
	der := []byte{0x30, 0x82, 0x01, 0x02, 0x03}
	block := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	for _, tc := range []struct {
		name string
		csr  []byte
		want string // "" when taken
	}{
		{"DER", der, ""},
		{"PEM", block, ""},
		{"PEM with blank lines", append(append([]byte("\n\n"), block...), '\n'), ""},
		{"old PEM type", pem.EncodeToMemory(&pem.Block{Type: "NEW CERTIFICATE REQUEST", Bytes: der}), ""},
		{"a certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), "not a CERTIFICATE REQUEST"},
		{"two blocks", append(append([]byte(nil), block...), block...), "after its PEM block"},
		{"broken PEM", []byte("-----BEGIN CERTIFICATE REQUEST-----\nnot base64"), "no PEM block"},
		{"empty", nil, "no CSR"},
	} {
		got, err := spec.CSRRequest{CSR: tc.csr}.DER()
		switch {
		case tc.want == "" && (err != nil || !bytes.Equal(got, der)):
			t.Errorf("%s: %x, %v; want the DER bytes", tc.name, got, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a refusal saying %q", tc.name, err, tc.want)
		}
	}
}

// FuzzDecodeCSRRequest: whatever a node sends on its CSR subject decodes
// or is refused without a panic, and what decodes encodes and decodes to
// the same request.
func FuzzDecodeCSRRequest(f *testing.F) {
	for _, seed := range []string{
		`{"csr":"MIIBAA=="}`,
		`{"csr":"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlJQkFBPT0KLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg=="}`,
		`{"csr":""}`,
		`{"csr":null}`,
		`{"csr":"!!"}`,
		`{"csr":1}`,
		`{"csr":"MA=="} {}`,
		`{"csr":"MA==","names":["x"]}`,
		`{}`,
		`null`,
		`[`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req spec.CSRRequest
		if err := spec.Decode(data, &req); err != nil {
			return
		}
		der, err := req.DER()
		if err == nil && len(der) == 0 {
			t.Fatalf("DER of %q is empty without an error", data)
		}
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("decoded %q, which does not encode: %v", data, err)
		}
		var req2 spec.CSRRequest
		if err := spec.Decode(again, &req2); err != nil || !bytes.Equal(req.CSR, req2.CSR) {
			t.Fatalf("%q decoded, encoded as %s, decodes to %q (%v)", data, again, req2.CSR, err)
		}
	})
}
