package spec_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// ParseWant takes one release digest, or nothing, and refuses all else:
// the launcher and its child decide through it alike.
func TestParseWant(t *testing.T) {
	t.Parallel()
	d := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{d, d, true},
		{d + "\n", d, true},
		{" " + d + "\r\n", d, true},
		{"", "", true},
		{"\n", "", true},
		{strings.ToUpper(d), "", false},
		{"./" + d, "", false},
		{"../" + d, "", false},
		{d[:63], "", false},
		{d + "0", "", false},
		{d + " " + d, "", false},
		{"notadigest", "", false},
		{strings.Repeat("g", 64), "", false},
	} {
		got, err := spec.ParseWant([]byte(tc.in))
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseWant(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// ReadWant: no file is no version; a file that does not parse is
// ErrBadWant, naming the file.
func TestReadWant(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if got, err := spec.ReadWant(dir); got != "" || err != nil {
		t.Errorf("no file: %q, %v", got, err)
	}
	d := strings.Repeat("cd", 32)
	if err := os.WriteFile(filepath.Join(dir, spec.WantFile), []byte(d+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := spec.ReadWant(dir); got != d || err != nil {
		t.Errorf("a digest: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, spec.WantFile), []byte("latest\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := spec.ReadWant(dir)
	if got != "" || !errors.Is(err, spec.ErrBadWant) || !strings.Contains(err.Error(), filepath.Join(dir, spec.WantFile)) {
		t.Errorf("a bad file: %q, %v; want ErrBadWant naming the file", got, err)
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
