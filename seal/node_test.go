package seal_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/seal"
)

func newNodeKey(t testing.TB) *seal.NodeKey {
	t.Helper()
	k, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestNodeSealRoundTrip seals to a public key read back from its text
// form and opens with the private half read back from its file.
func TestNodeSealRoundTrip(t *testing.T) {
	k := newNodeKey(t)
	path := filepath.Join(t.TempDir(), seal.NodeKeyFile)
	if err := k.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 || info.Size() != 32 {
		t.Fatalf("key file: mode %v, %d bytes; want 0600, 32", info.Mode().Perm(), info.Size())
	}
	loaded, err := seal.LoadNodeKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Public() != k.Public() {
		t.Fatalf("loaded key's public half %s, want %s", loaded.Public(), k.Public())
	}
	pub, err := seal.ParseNodePublic(k.Public().String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pub.String(), "x25519:") {
		t.Fatalf("public key %q: want the x25519: prefix", pub)
	}
	for _, plain := range [][]byte{[]byte("hunter2"), {}, bytes.Repeat([]byte{0xff}, 4096)} {
		text, err := seal.SealTo(pub, plain)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(text, "sealed-node:v1:") {
			t.Fatalf("sealed text %q: want the sealed-node:v1: prefix", text)
		}
		if bytes.Contains([]byte(text), plain) && len(plain) > 0 {
			t.Fatalf("sealed text holds the plaintext")
		}
		got, err := loaded.Open(text)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, plain) {
			t.Fatalf("opened %q, want %q", got, plain)
		}
	}
	// Sealing is randomised: the same value sealed twice reads differently.
	a, _ := seal.SealTo(pub, []byte("same"))
	b, _ := seal.SealTo(pub, []byte("same"))
	if a == b {
		t.Fatal("two seals of one value are equal")
	}
}

// TestNodeSealOtherKeyCannotOpen: a value sealed to one node is refused
// by another's key.
func TestNodeSealOtherKeyCannotOpen(t *testing.T) {
	mine, theirs := newNodeKey(t), newNodeKey(t)
	text, err := seal.SealTo(theirs.Public(), []byte("theirs only"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := mine.Open(text); err == nil {
		t.Fatalf("another node's key opened it: %q", got)
	} else if !strings.Contains(err.Error(), "not sealed to") {
		t.Fatalf("error %q does not say why", err)
	}
	if _, err := theirs.Open(text); err != nil {
		t.Fatal(err)
	}
}

// TestNodeSealTampered: a sealed value with any byte changed is refused.
func TestNodeSealTampered(t *testing.T) {
	k := newNodeKey(t)
	text, err := seal.SealTo(k.Public(), []byte("do not touch"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(text, "sealed-node:v1:"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range raw {
		bad := bytes.Clone(raw)
		bad[i] ^= 0x01
		if got, err := k.Open("sealed-node:v1:" + base64.RawURLEncoding.EncodeToString(bad)); err == nil {
			t.Fatalf("byte %d changed, and it opened: %q", i, got)
		}
	}
	if _, err := k.Open(text[:len(text)-4]); err == nil {
		t.Fatal("a cut sealed value opened")
	}
}

func TestParseNodePublicRefuses(t *testing.T) {
	good := newNodeKey(t).Public().String()
	body := strings.TrimPrefix(good, "x25519:")
	short := base64.RawURLEncoding.EncodeToString(make([]byte, 31))
	for _, s := range []string{
		"",
		body,                    // no prefix
		"X25519:" + body,        // another prefix
		"ed25519:" + body,       // another kind
		"x25519:",               // nothing
		"x25519:" + short,       // 31 bytes
		"x25519:" + body + "AA", // 33 bytes and more
		"x25519:" + body + "=",  // padded
		"x25519:" + strings.ReplaceAll(strings.ReplaceAll(body, "-", "+"), "_", "/") + "+", // std alphabet
		"x25519:" + body[:len(body)-1] + "!",
		" " + good,
		good + "\n",
		"x25519:" + base64.RawURLEncoding.EncodeToString(make([]byte, 32)), // all zeros
	} {
		if p, err := seal.ParseNodePublic(s); err == nil {
			t.Errorf("ParseNodePublic(%q) = %s, want an error", s, p)
		}
	}
	if _, err := seal.ParseNodePublic(good); err != nil {
		t.Fatal(err)
	}
}

func TestOpenNodeSealedRefusesMalformed(t *testing.T) {
	k := newNodeKey(t)
	text, err := seal.SealTo(k.Public(), []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(text, "sealed-node:v1:")
	for _, s := range []string{
		"",
		body,
		"sealed-node:v2:" + body,
		"sealed-node:v1:",
		"sealed-node:v1:" + body + "=",
		"sealed-node:v1:" + body + "!",
		"sealed-node:v1:" + base64.RawURLEncoding.EncodeToString(make([]byte, 47)),
		"sealed-node:v1:" + base64.RawURLEncoding.EncodeToString(make([]byte, 48)),
	} {
		if got, err := k.Open(s); err == nil {
			t.Errorf("Open(%q) = %q, want an error", s, got)
		}
	}
}

func TestLoadNodeKeyRefuses(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, body []byte, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, body, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		path, want string
	}{
		{write("short", make([]byte, 31), 0o600), "31 bytes, want 32"},
		{write("long", make([]byte, 33), 0o600), "33 bytes, want 32"},
		{write("newline", append(make([]byte, 32), '\n'), 0o600), "33 bytes, want 32"},
		{write("group", bytes.Repeat([]byte{7}, 32), 0o640), "mode 0640"},
		{write("world", bytes.Repeat([]byte{7}, 32), 0o604), "mode 0604"},
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "not a regular file"},
	} {
		_, err := seal.LoadNodeKey(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadNodeKey(%s) = %v, want an error saying %q", filepath.Base(c.path), err, c.want)
		}
	}
	// A key is written once: WriteFile does not replace one.
	k := newNodeKey(t)
	path := filepath.Join(dir, seal.NodeKeyFile)
	if err := k.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	if err := newNodeKey(t).WriteFile(path); err == nil {
		t.Fatal("WriteFile replaced a key")
	}
	if got, err := seal.LoadNodeKey(path); err != nil || got.Public() != k.Public() {
		t.Fatalf("key after a refused write: %v, %v", got, err)
	}
}

func FuzzParseNodePublic(f *testing.F) {
	f.Add(newNodeKey(f).Public().String())
	f.Add("x25519:")
	f.Add("x25519:AAAA")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := seal.ParseNodePublic(s)
		if err != nil {
			return
		}
		// What parses is written back exactly as it was read.
		if p.String() != s {
			t.Fatalf("ParseNodePublic(%q) wrote back %q", s, p)
		}
	})
}

func FuzzOpenNodeSealed(f *testing.F) {
	k := newNodeKey(f)
	other := newNodeKey(f)
	for _, plain := range []string{"", "x", "a longer secret value"} {
		text, _ := seal.SealTo(k.Public(), []byte(plain))
		f.Add(text)
		text, _ = seal.SealTo(other.Public(), []byte(plain))
		f.Add(text)
	}
	f.Add("sealed-node:v1:")
	f.Add("sealed-node:v1:AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		plain, err := k.Open(s)
		if err != nil {
			return
		}
		// Only what was sealed to k opens: the seeds, and nothing the
		// fuzzer makes up without the key.
		if !strings.HasPrefix(s, "sealed-node:v1:") || plain == nil {
			t.Fatalf("Open(%q) = %q", s, plain)
		}
	})
}

// TestSealerSealsManyUnderOneAgreement: values sealed by one Sealer each
// open with the node's key, and the same value sealed twice reads
// differently (a nonce a value), so equal values are not told apart.
func TestSealerSealsManyUnderOneAgreement(t *testing.T) {
	t.Parallel()
	k, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := seal.NewSealer(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, v := range []string{"one", "two", "one", ""} {
		text, err := s.Seal([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		got, err := k.Open(text)
		if err != nil || string(got) != v {
			t.Fatalf("%q sealed by one Sealer opens as %q, %v", v, got, err)
		}
		texts = append(texts, text)
	}
	if texts[0] == texts[2] {
		t.Fatal("one value sealed twice reads the same")
	}
}
