package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/statedir"
)

// TestSharedKeysTravelSealed: a joining controller's copy of the shared
// keys is sealed to its own key, holds none of them in the clear, and
// opens into a directory whose files have the bytes and modes genesis
// gave them; another key cannot open it.
func TestSharedKeysTravelSealed(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a")
	if err := Create(context.Background(), Genesis{Dir: dir, Mesh: "home", Node: "alpha", Address: "127.0.0.1", Bus: "127.0.0.1:4222"}); err != nil {
		t.Fatal(err)
	}
	st, err := KeepClusterListen(dir, "home", "127.0.0.1:6222", "nats://127.0.0.1:4222")
	if err != nil {
		t.Fatal(err)
	}
	joiner, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ReadSharedKeys(dir, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.Files) < 3 {
		t.Fatalf("shared keys: %d files, want the signing key, the at-rest key and the CA's", len(keys.Files))
	}
	sealed, err := keys.Seal(joiner.Public())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range keys.Files {
		for _, clear := range []string{string(f.Data), base64.StdEncoding.EncodeToString(f.Data)} {
			if len(f.Data) > 0 && strings.Contains(sealed, clear) {
				t.Fatalf("the sealed keys hold %s in the clear", f.Path)
			}
		}
	}
	if strings.Contains(sealed, st.Password) {
		t.Fatal("the sealed keys hold the route password in the clear")
	}
	other, _ := seal.GenerateNodeKey()
	if _, err := OpenSharedKeys(other, sealed); err == nil {
		t.Fatal("another key opened the shared keys")
	}
	got, err := OpenSharedKeys(joiner, sealed)
	if err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(t.TempDir(), "b")
	if err := got.Write(dir2); err != nil {
		t.Fatal(err)
	}
	for _, f := range keys.Files {
		orig := filepath.Join(statedir.Controller(dir), filepath.FromSlash(f.Path))
		copied := filepath.Join(statedir.Controller(dir2), filepath.FromSlash(f.Path))
		a, _ := os.Stat(orig)
		b, err := os.Stat(copied)
		if err != nil {
			t.Fatal(err)
		}
		if a.Mode().Perm() != b.Mode().Perm() {
			t.Errorf("%s: mode %v, genesis gave %v", f.Path, b.Mode().Perm(), a.Mode().Perm())
		}
		data, _ := os.ReadFile(copied)
		if !bytes.Equal(data, f.Data) {
			t.Errorf("%s: the bytes differ", f.Path)
		}
	}
	for _, rel := range []string{"sign.key", "seal.key", ClusterFile} {
		fi, err := os.Stat(filepath.Join(statedir.Controller(dir2), rel))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", rel, err, fi.Mode())
		}
	}
	bad := got
	bad.Files = append(bad.Files, SharedFile{Path: "../escape", Mode: 0o600, Data: []byte("x")})
	if err := bad.Write(filepath.Join(t.TempDir(), "c")); err == nil {
		t.Fatal("a shared file outside the controller's directory was written")
	}
}
