package release

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Digest keeps what it hashed, but never past a change of the file: a
// rewrite of the same size with its modification time set back, and a
// replacement by rename, are each hashed again.
func TestDigestFollowsTheFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mesh")
	sum := func(b string) string { s := sha256.Sum256([]byte(b)); return hex.EncodeToString(s[:]) }
	want := func(step, body string) {
		t.Helper()
		for range 2 { // the second from what was kept
			got, err := Digest(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != sum(body) {
				t.Fatalf("%s: Digest = %s, want %s", step, got, sum(body))
			}
		}
	}
	if err := os.WriteFile(path, []byte("version one"), 0o755); err != nil {
		t.Fatal(err)
	}
	want("first", "version one")

	fi, _ := os.Stat(path)
	if err := os.WriteFile(path, []byte("version two"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	want("rewritten in place, same size, modification time set back", "version two")

	next := path + ".new"
	if err := os.WriteFile(next, []byte("version three"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, path); err != nil {
		t.Fatal(err)
	}
	want("replaced by rename", "version three")

	if _, err := Digest(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("Digest of a missing file: no error")
	}
}

// TestDigestTakesTheHandoff: the digest a parent hands over (HandoffEnv)
// is taken for the file it names, as it was, and for no other: once the
// file changes, it is hashed again.
func TestDigestTakesTheHandoff(t *testing.T) {
	dir := t.TempDir()
	path, other := filepath.Join(dir, "mesh"), filepath.Join(dir, "other")
	for _, p := range []string{path, other} {
		if err := os.WriteFile(p, []byte("the binary at "+p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	entry, err := Handoff(path)
	if err != nil {
		t.Fatal(err)
	}
	name, value, _ := strings.Cut(entry, "=")
	ident, real, _ := strings.Cut(value, " ")
	if name != HandoffEnv || real != digestOf("the binary at "+path) {
		t.Fatalf("Handoff = %q, want %s=IDENTITY %s", entry, HandoffEnv, digestOf("the binary at "+path))
	}
	// A digest no hash of the file gives: taken only if handed over.
	handed := strings.Repeat("ab", 32)
	t.Setenv(HandoffEnv, ident+" "+handed)
	hashed.Clear() // what Handoff kept: this process is the child now
	if got, _ := Digest(path); got != handed {
		t.Fatalf("Digest of the file handed over = %s, want the handed %s", got, handed)
	}
	if got, _ := Digest(other); got != digestOf("the binary at "+other) {
		t.Fatalf("Digest of another file = %s, want its own hash", got)
	}
	if err := os.WriteFile(path, []byte("written since"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, _ := Digest(path); got != digestOf("written since") {
		t.Fatalf("Digest of the handed-over file written since = %s, want its new hash", got)
	}
}

func digestOf(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:]) }
