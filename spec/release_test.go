package spec_test

import (
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestCheckReleaseDigest: a release is named by its SHA-256 as mesh version
// prints it, and nothing else passes for one.
func TestCheckReleaseDigest(t *testing.T) {
	t.Parallel()
	good := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		digest string
		ok     bool
	}{
		{good, true},
		{"sha256:" + good, false},
		{strings.ToUpper(good), false},
		{good[:63], false},
		{good + "0", false},
		{good[:63] + "g", false},
		{"", false},
	} {
		err := spec.CheckReleaseDigest(tc.digest)
		if (err == nil) != tc.ok {
			t.Errorf("CheckReleaseDigest(%q) = %v, want ok %v", tc.digest, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "64") {
			t.Errorf("CheckReleaseDigest(%q) = %q: does not say what a digest is", tc.digest, err)
		}
	}
}
