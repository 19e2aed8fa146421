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

// TestDigestKept: the digest kept for a file as it is now is taken without
// reading the file, in a process that never hashed it; one kept for the
// file before it changed is not, and keep is written again; a keep that
// cannot be written is no error.
func TestDigestKept(t *testing.T) {
	dir := t.TempDir()
	path, keep := filepath.Join(dir, "mesh"), filepath.Join(dir, "executable.sha256")
	if err := os.WriteFile(path, []byte("version one"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := DigestKept(path, keep); err != nil || got != digestOf("version one") {
		t.Fatalf("DigestKept = %s, %v; want %s", got, err, digestOf("version one"))
	}
	kept, err := os.ReadFile(keep)
	if err != nil {
		t.Fatalf("keep not written: %v", err)
	}
	ident, d, _ := strings.Cut(strings.TrimSpace(string(kept)), " ")
	if d != digestOf("version one") {
		t.Fatalf("keep holds %q, want the identity and %s", kept, digestOf("version one"))
	}

	// A digest no hash of the file gives: taken only from keep.
	forged := strings.Repeat("cd", 32)
	if err := os.WriteFile(keep, []byte(ident+" "+forged+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hashed.Clear() // a new process
	if got, _ := DigestKept(path, keep); got != forged {
		t.Fatalf("DigestKept with the file as kept = %s, want what keep holds, %s", got, forged)
	}

	hashed.Clear()
	if err := os.WriteFile(path, []byte("version two"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, _ := DigestKept(path, keep); got != digestOf("version two") {
		t.Fatalf("DigestKept of the file written since = %s, want its new hash %s", got, digestOf("version two"))
	}
	if kept, _ := os.ReadFile(keep); !strings.HasSuffix(strings.TrimSpace(string(kept)), digestOf("version two")) {
		t.Fatalf("keep after the change holds %q, want the new digest", kept)
	}

	hashed.Clear()
	if got, err := DigestKept(path, filepath.Join(dir, "no", "such", "dir", "keep")); err != nil || got != digestOf("version two") {
		t.Fatalf("DigestKept with a keep that cannot be written = %s, %v; want the hash and no error", got, err)
	}
}
