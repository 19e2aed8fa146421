package mesh

import (
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

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
