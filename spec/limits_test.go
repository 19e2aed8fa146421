package spec_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mesh-fleet/mesh/spec"
)

// TestEncodedLen: the count is what encoding/json writes, quotes excluded,
// for the characters that escape (six-fold for <, > and &).
func TestEncodedLen(t *testing.T) {
	for _, s := range []string{"", "plain", "<>&", "\"\\\n\r\t\b\f", "\x00\x1f", "é€😀", "\u2028\u2029", "bad\xffbyte", strings.Repeat("<a", 100)} {
		b, _ := json.Marshal(s)
		if got, want := spec.EncodedLen(s), len(b)-2; got != want {
			t.Errorf("EncodedLen(%q) = %d, encoding/json writes %d", s, got, want)
		}
	}
}

// TestClip: a text that fits is kept whole; one that does not is cut on a
// character boundary, marked, and fits once encoded.
func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s   string
		max int
	}{
		{strings.Repeat("<", 10000), 256},
		{strings.Repeat("é", 10000), 256},
		{strings.Repeat("a", 10000), 100},
		{strings.Repeat("a<€", 5000), 2048},
	} {
		got := spec.Clip(tc.s, tc.max)
		b, _ := json.Marshal(got)
		if len(b)-2 > tc.max || !utf8.ValidString(got) || !strings.HasSuffix(got, " bytes cut]") {
			t.Errorf("Clip(%d bytes, %d) = %d bytes encoded, %q...", len(tc.s), tc.max, len(b)-2, got[:min(len(got), 40)])
		}
		if kept := got[:strings.LastIndex(got, "…[")]; len(kept) == 0 || !strings.HasPrefix(tc.s, kept) {
			t.Errorf("Clip kept %q, not a prefix of the text", kept)
		}
	}
	if got := spec.Clip("short <b>", 64); got != "short <b>" {
		t.Errorf("a text that fits was changed: %q", got)
	}
}
