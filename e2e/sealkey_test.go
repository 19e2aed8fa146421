package e2e

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/mesh-fleet/mesh/seal"
)

// checkSealKey checks what a joined host keeps of its sealing key, in its
// state directory dir: the private half in host/seal.key alone (0600, in
// no form in state.json), whose public half is shown, the node's
// recorded key, and opens what is sealed to that key. It gives the key.
func checkSealKey(t testing.TB, dir, shown string) *seal.NodeKey {
	t.Helper()
	path := filepath.Join(dir, "host", seal.NodeKeyFile)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the host keeps no sealing key: %v", err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("%s: mode %v, want 0600", path, info.Mode().Perm())
	}
	k, err := seal.LoadNodeKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if k.Public().String() != shown {
		t.Fatalf("node show gives sealing key %q, the host's is %q", shown, k.Public())
	}
	pub, err := seal.ParseNodePublic(shown)
	if err != nil {
		t.Fatal(err)
	}
	text, err := seal.SealTo(pub, []byte("for this node alone"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := k.Open(text); err != nil || string(got) != "for this node alone" {
		t.Fatalf("the host's key opens what is sealed to its shown key: %q, %v", got, err)
	}
	private, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	state, err := os.ReadFile(filepath.Join(dir, "host", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range [][]byte{
		private,
		[]byte(base64.StdEncoding.EncodeToString(private)),
		[]byte(base64.RawStdEncoding.EncodeToString(private)),
		[]byte(base64.URLEncoding.EncodeToString(private)),
		[]byte(base64.RawURLEncoding.EncodeToString(private)),
	} {
		if bytes.Contains(state, form) {
			t.Fatalf("state.json holds the sealing key's private half")
		}
	}
	return k
}
