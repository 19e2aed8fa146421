package seal_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mesh-fleet/mesh/seal"
)

// A WireGuard key is written once, 0600, and reads back to the public
// half MakeWGKey gave.
func TestMakeWGKeyWritesAKeyOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), seal.WGKeyFile)
	pub, err := seal.MakeWGKey(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %04o, want 0600", info.Mode().Perm())
	}
	priv, pub2, err := seal.LoadWGKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if pub2 != pub || len(priv) != 44 || len(pub) != 44 {
		t.Fatalf("loaded public %q private length %d, want %q", pub2, len(priv), pub)
	}
	if _, err := seal.MakeWGKey(path); err == nil {
		t.Fatal("a second key over the first was written")
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := seal.LoadWGKey(path); err == nil {
		t.Fatal("a key readable by others was loaded")
	}
}
