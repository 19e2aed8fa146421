package release

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
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
