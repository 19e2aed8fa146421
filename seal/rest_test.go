package seal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func newKey(t testing.TB) *RestKey {
	t.Helper()
	k, err := CreateRestKey(filepath.Join(t.TempDir(), "seal.key"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestRestSealOpensOnlyInItsPlace(t *testing.T) {
	k := newKey(t)
	here := Place("assignment", "web", "alpha", "token")
	text := k.SealText("SuperSecret123", here)
	if !IsSealedText(text) || strings.Contains(text, "SuperSecret123") {
		t.Fatalf("sealed text %q", text)
	}
	got, err := k.OpenText(text, here)
	if err != nil || got != "SuperSecret123" {
		t.Fatalf("open in its place: %q, %v", got, err)
	}
	for _, there := range []string{
		Place("assignment", "web", "beta", "token"),
		Place("assignment", "web", "alpha", "password"),
		Place("assignment", "api", "alpha", "token"),
		"",
	} {
		if v, err := k.OpenText(text, there); err == nil {
			t.Errorf("opened in place %q: %q", there, v)
		}
	}
	if v, err := newKey(t).OpenText(text, here); err == nil {
		t.Errorf("opened under another key: %q", v)
	}
	body, _ := DecodeText(text)
	body[len(body)-1] ^= 1
	if _, err := k.Open(body, here); err == nil {
		t.Error("opened with a byte changed")
	}
}

func TestRestSealTakesAFreshNonceEachTime(t *testing.T) {
	k := newKey(t)
	a, b := k.SealText("v", "p"), k.SealText("v", "p")
	if a == b {
		t.Fatalf("the same value sealed twice reads the same: %q", a)
	}
}

func TestRestOpenTextRefusesPlainText(t *testing.T) {
	k := newKey(t)
	if _, err := k.OpenText("SuperSecret123", "p"); !errors.Is(err, ErrNotSealed) {
		t.Fatalf("plain text: %v, want ErrNotSealed", err)
	}
	for _, bad := range []string{TextPrefix, TextPrefix + "!!", TextPrefix + "AAAA", "sealed:v2:AAAA"} {
		if _, err := k.OpenText(bad, "p"); err == nil {
			t.Errorf("%q opened", bad)
		}
	}
}

func TestRestKeyFileRoundTrips(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seal.key")
	k, err := CreateRestKey(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 || info.Size() != RestKeySize {
		t.Fatalf("key file mode %04o size %d", info.Mode().Perm(), info.Size())
	}
	again, err := LoadRestKey(path)
	if err != nil {
		t.Fatal(err)
	}
	text := k.SealText("v", "p")
	if v, err := again.OpenText(text, "p"); err != nil || v != "v" {
		t.Fatalf("the loaded key opens %q, %v", v, err)
	}
	if k.Digest([]byte("v")) != again.Digest([]byte("v")) {
		t.Fatal("the loaded key digests otherwise")
	}
	if _, err := CreateRestKey(path); err == nil {
		t.Fatal("a second key was written over the first")
	}
}

func TestRestKeyFileRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, body []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, body, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := bytes.Repeat([]byte{7}, RestKeySize)
	for _, c := range []struct {
		name, path, want string
	}{
		{"short", write("short", key[:31], 0o600), "31 bytes, want 32"},
		{"long", write("long", append(key, 0), 0o600), "33 bytes, want 32"},
		{"empty", write("empty", nil, 0o600), "0 bytes, want 32"},
		{"group-readable", write("group", key, 0o640), "chmod 600"},
		{"world-readable", write("world", key, 0o604), "chmod 600"},
		{"directory", dir, "not a regular file"},
	} {
		if _, err := LoadRestKey(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if _, err := LoadRestKey(write("owner-read-only", key, 0o400)); err != nil {
		t.Errorf("a key only its owner reads: %v", err)
	}
	if _, err := LoadRestKey(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing key: %v, want os.ErrNotExist", err)
	}
}

func TestRestDigestIsKeyed(t *testing.T) {
	k, other := newKey(t), newKey(t)
	a, b := k.Digest([]byte("SuperSecret123")), k.Digest([]byte("SuperSecret123"))
	if a != b || len(a) != 64 {
		t.Fatalf("digests %q, %q", a, b)
	}
	if k.Digest([]byte("SuperSecret124")) == a {
		t.Fatal("two values digest alike")
	}
	if other.Digest([]byte("SuperSecret123")) == a {
		t.Fatal("two keys digest alike")
	}
}

// FuzzOpenText feeds the text form's decoder any text: it never panics,
// and nothing but a value this key sealed for this place opens.
func FuzzOpenText(f *testing.F) {
	k, err := NewRestKey(bytes.Repeat([]byte{1}, RestKeySize))
	if err != nil {
		f.Fatal(err)
	}
	place := Place("assignment", "web", "alpha", "token")
	f.Add(k.SealText("SuperSecret123", place))
	f.Add(k.SealText("", place))
	f.Add(TextPrefix)
	f.Add(TextPrefix + "====")
	f.Add("SuperSecret123")
	f.Fuzz(func(t *testing.T, text string) {
		v, err := k.OpenText(text, place)
		if err != nil {
			return
		}
		if !IsSealedText(text) {
			t.Fatalf("%q opened without the prefix", text)
		}
		if _, err := k.OpenText(text, place+"x"); err == nil {
			t.Fatalf("%q opened in another place", text)
		}
		if back, err := k.OpenText(k.SealText(v, place), place); err != nil || back != v {
			t.Fatalf("resealed %q opens %q, %v", v, back, err)
		}
	})
}
