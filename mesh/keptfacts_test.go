package mesh

import (
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestKeptFactsBoundCertificates: the certificates a host says it serves
// are kept to spec.MaxFactList, each text within spec.MaxFactText; a few
// short ones as they came.
func TestKeptFactsBoundCertificates(t *testing.T) {
	t.Parallel()
	long := spec.HeldCert{Name: strings.Repeat("a", 4096), Path: "/" + strings.Repeat("p", 4096), Serial: strings.Repeat("0", 4096)}
	many := make([]spec.HeldCert, 3*spec.MaxFactList)
	for i := range many {
		many[i] = long
	}
	got := keptFacts(spec.Facts{Certificates: many}).Certificates
	if len(got) != spec.MaxFactList {
		t.Errorf("%d certificates kept, want %d", len(got), spec.MaxFactList)
	}
	for _, c := range got {
		for _, s := range []string{c.Name, c.Path, c.Serial} {
			if spec.EncodedLen(s) > spec.MaxFactText {
				t.Fatalf("a certificate's text kept at %d bytes, want at most %d", spec.EncodedLen(s), spec.MaxFactText)
			}
		}
	}
	if many[0].Name != long.Name {
		t.Error("keeping the facts changed what the host sent")
	}
	short := []spec.HeldCert{{Name: "web.alpha.internal", Path: "/srv/web/tls", Serial: "0a"}}
	if got := keptFacts(spec.Facts{Certificates: short}).Certificates; len(got) != 1 || got[0] != short[0] {
		t.Errorf("certificates kept as %+v, want %+v", got, short)
	}
}

// TestKeptFactsBoundTrustInstalled: the trust_installed fact a host sends
// is kept within spec.MaxFactText like every other text of the facts, and a
// short one as it came.
func TestKeptFactsBoundTrustInstalled(t *testing.T) {
	t.Parallel()
	long := "/usr/local/share/ca-certificates/mesh-" + strings.Repeat("x", 4096) + ".crt"
	if got := keptFacts(spec.Facts{TrustInstalled: long}).TrustInstalled; spec.EncodedLen(got) > spec.MaxFactText {
		t.Errorf("trust_installed kept at %d bytes, want at most %d", spec.EncodedLen(got), spec.MaxFactText)
	}
	short := "/usr/local/share/ca-certificates/mesh-mesh.crt"
	if got := keptFacts(spec.Facts{TrustInstalled: short}).TrustInstalled; got != short {
		t.Errorf("trust_installed kept as %q, want %q", got, short)
	}
}

// TestKeptFactsBoundIntermediate: the intermediate's serial a host says it
// holds is kept within spec.MaxFactText, and a serial as it came.
func TestKeptFactsBoundIntermediate(t *testing.T) {
	t.Parallel()
	if got := keptFacts(spec.Facts{Intermediate: strings.Repeat("f", 4096)}).Intermediate; spec.EncodedLen(got) > spec.MaxFactText {
		t.Errorf("intermediate kept at %d bytes, want at most %d", spec.EncodedLen(got), spec.MaxFactText)
	}
	const serial = "7d0804e7bdd7c66fe60e43e654cb364f"
	if got := keptFacts(spec.Facts{Intermediate: serial}).Intermediate; got != serial {
		t.Errorf("intermediate kept as %q, want %q", got, serial)
	}
}
