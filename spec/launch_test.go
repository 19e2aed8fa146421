package spec_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// A heartbeat carries the newest fallbacks first, at most MaxFallbacks of
// them, each naming its digest.
func TestLaunchFallbacks(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	l := spec.Launch{Bad: map[string]spec.Fallback{}}
	for i := range spec.MaxFallbacks + 2 {
		d := fmt.Sprintf("d%d", i)
		l.Bad[d] = spec.Fallback{Digest: d, Reason: "exited", At: t0.Add(time.Duration(i) * time.Minute)}
	}
	got := l.Fallbacks()
	var digests []string
	for _, f := range got {
		digests = append(digests, f.Digest)
	}
	if want := []string{"d5", "d4", "d3", "d2"}; !reflect.DeepEqual(digests, want) {
		t.Errorf("fallbacks %v, want %v", digests, want)
	}
	if got := (spec.Launch{}).Fallbacks(); got != nil {
		t.Errorf("no bad versions: %v, want none", got)
	}
}

// ParseRetry takes what Encode writes and refuses anything else without
// panicking: what it accepts encodes back to the same retry.
func FuzzParseRetry(f *testing.F) {
	d := strings.Repeat("ab", 32)
	for _, seed := range []string{d + " 1\n", d + " 0\n", d + " -1", "x 1", d + " 1 2", d, "", d + " 99999999999999999999"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := spec.ParseRetry(b)
		if err != nil {
			return
		}
		if r.Count < 1 || r.Count > spec.MaxRetry {
			t.Fatalf("accepted count %d", r.Count)
		}
		back, err := spec.ParseRetry(r.Encode())
		if err != nil || back != r {
			t.Fatalf("%q: %+v encodes to %q, which reads %+v %v", b, r, r.Encode(), back, err)
		}
	})
}
