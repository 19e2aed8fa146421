package daemon

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// testWorkFactor keeps scrypt cheap in tests: age's default costs a
// second and 256 MiB for each seal and open.
const testWorkFactor = 10

const (
	testPassphrase = "correct horse battery"
	testSecret     = "SuperSecret-777777777777"
)

// backedMesh makes a mesh's state directory as genesis and a first push
// leave it: a module with a secret setting assigned to alpha, sealed
// under the at-rest key, a declaration sent to alpha, the addresses and
// config.yaml. It returns the directory.
func backedMesh(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "mesh")
	if err := Create(ctx, Genesis{Dir: dir, Mesh: "home", Node: "alpha", Address: "127.0.0.1", Bus: "127.0.0.1:4222"}); err != nil {
		t.Fatal(err)
	}
	if err := statedir.WriteAddrs(dir, spec.Addrs{Bus: "127.0.0.1:4222", HTTP: "127.0.0.1:8480"}); err != nil {
		t.Fatal(err)
	}
	if err := statedir.WriteConfig(dir, statedir.Config{"root": {"/srv/root"}, "reconcile": {"30s"}}); err != nil {
		t.Fatal(err)
	}
	ctl := statedir.Controller(dir)
	rest, err := seal.LoadRestKey(filepath.Join(ctl, mesh.SealKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	key, err := mesh.LoadSignKey(ctl)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, filepath.Join(ctl, mesh.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	mod := spec.Module{Name: "vault", Version: "1", Settings: []spec.Setting{{Name: "token", Type: "string", Secret: true}}, Resources: spec.Resources{}}
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, now); err != nil {
		t.Fatal(err)
	}
	sealed := rest.SealText(testSecret, secretPlace)
	if err := db.Assign(ctx, "vault", "alpha", map[string]string{"token": sealed}, now); err != nil {
		t.Fatal(err)
	}
	decl := spec.Declaration{Mesh: "home", Node: "alpha", Seq: 5, Issued: now.UTC(), Expires: now.UTC().Add(time.Hour), Protocol: spec.Protocol, Resources: spec.Resources{}}
	body, _ := json.Marshal(decl)
	if err := db.RecordDeclaration(ctx, store.Declaration{Node: "alpha", Seq: 5, Body: body, Sig: ed25519.Sign(key, body), Sent: now, Expires: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// secretPlace is where the controller seals the test's secret setting.
var secretPlace = seal.Place("assignment", "vault", "alpha", "token")

func writeBackup(t *testing.T, dir, file, passphrase string) (BackupHeader, error) {
	t.Helper()
	return WriteBackup(context.Background(), Backup{Dir: dir, File: file, Passphrase: passphrase, Binary: "test", Now: time.Now(), WorkFactor: testWorkFactor})
}

// A backup restored into a new directory is the controller's directory
// again: the same store (the module, its assignment, the secret setting
// still opened by the at-rest key it carried), the same keys, the flags
// and addresses kept, modes as genesis makes them, the host's state a
// bare machine's, and the last declaration renumbered past any a host
// saw. The file holds neither the secret, nor a key, nor the operator's
// seed in plain.
func TestBackupRestoresTheControllerDirectory(t *testing.T) {
	ctx := context.Background()
	dir := backedMesh(t)
	file := filepath.Join(t.TempDir(), "home.backup")
	h, err := writeBackup(t, dir, file, testPassphrase)
	if err != nil {
		t.Fatal(err)
	}
	if h.Format != BackupFormat || h.Version != BackupVersion || h.Mesh != "home" || h.Binary != "test" {
		t.Fatalf("header %+v", h)
	}
	if info, err := os.Stat(file); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the backup: %v, %v; want mode 0600", info, err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	op, err := statedir.ReadOperator(dir)
	if err != nil {
		t.Fatal(err)
	}
	restKey, _ := os.ReadFile(filepath.Join(statedir.Controller(dir), mesh.SealKeyFile))
	for what, plain := range map[string][]byte{"the secret": []byte(testSecret), "a PEM block": []byte("-----BEGIN"),
		"a private key": []byte("PRIVATE KEY"), "the operator's seed": []byte(op.Seed), "the at-rest key": restKey, "the mesh's name": []byte(`"home"`)} {
		if bytes.Contains(raw, plain) {
			t.Errorf("the backup holds %s in plain", what)
		}
	}

	restored := filepath.Join(t.TempDir(), "restored")
	got, err := RestoreBackup(ctx, Restore{File: file, Dir: restored, Passphrase: testPassphrase, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if got.Mesh != "home" || len(got.Files) != len(h.Files) {
		t.Fatalf("restored header %+v, want %+v", got, h)
	}
	for _, name := range h.Files {
		if name == storeMember || name == filepath.Join(statedir.HostDir, host.StateFile) {
			continue
		}
		want, _ := os.ReadFile(filepath.Join(dir, name))
		have, err := os.ReadFile(filepath.Join(restored, name))
		if err != nil || !bytes.Equal(have, want) {
			t.Errorf("%s restored differs: %v", name, err)
		}
	}
	checkModes(t, restored)
	if kc, err := statedir.ReadConfig(restored); err != nil || kc["root"][0] != "/srv/root" || kc["reconcile"][0] != "30s" {
		t.Errorf("config.yaml restored: %v, %v", kc, err)
	}
	if a, err := statedir.ReadAddrs(restored); err != nil || a.Bus != "127.0.0.1:4222" {
		t.Errorf("addrs.json restored: %+v, %v", a, err)
	}
	st, _, err := host.ReadState(statedir.Host(restored))
	if err != nil || st.Node != "alpha" || st.Mesh != "home" || st.SignKey == "" || st.CAPin == "" || st.Seq != 0 || len(st.Applied) != 0 {
		t.Errorf("host state restored: %+v, %v; want alpha's identity and nothing applied", st, err)
	}

	ctl := statedir.Controller(restored)
	rest, err := seal.LoadRestKey(filepath.Join(ctl, mesh.SealKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, filepath.Join(ctl, mesh.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, err := db.Assignment(ctx, "vault", "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := rest.OpenText(a.Settings["token"], secretPlace); err != nil || v != testSecret {
		t.Fatalf("the secret setting restored opens to %q, %v", v, err)
	}
	d, err := db.LastDeclaration(ctx, "alpha")
	if err != nil || d.Seq != 5+mesh.RenumberGap {
		t.Fatalf("alpha's last declaration restored: %d, %v; want %d", d.Seq, err, 5+mesh.RenumberGap)
	}
}

// checkModes fails for a directory under dir not 0700, or a file other
// than addrs.json and the CA's certificates that others may read.
func checkModes(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			t.Error(err)
			return nil
		}
		perm := info.Mode().Perm()
		switch {
		case d.IsDir() && perm != 0o700:
			t.Errorf("%s: mode %04o, want 0700", p, perm)
		case !d.IsDir() && strings.HasSuffix(p, ".key") && perm != 0o600,
			!d.IsDir() && strings.HasSuffix(p, ".creds") && perm != 0o600:
			t.Errorf("%s: mode %04o, want 0600", p, perm)
		case !d.IsDir() && perm&0o022 != 0:
			t.Errorf("%s: mode %04o, others may write it", p, perm)
		}
		return nil
	})
}

// A wrong passphrase says so, and nothing is written.
func TestRestoreRefusesAWrongPassphrase(t *testing.T) {
	dir := backedMesh(t)
	file := filepath.Join(t.TempDir(), "home.backup")
	if _, err := writeBackup(t, dir, file, testPassphrase); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	_, err := RestoreBackup(context.Background(), Restore{File: file, Dir: restored, Passphrase: "not the passphrase", Now: time.Now()})
	if !errors.Is(err, ErrWrongPassphrase) || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("restore with a wrong passphrase: %v", err)
	}
	if _, err := os.Stat(restored); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("restore with a wrong passphrase made %s: %v", restored, err)
	}
}

// A directory that holds anything is refused, and left as it was.
func TestRestoreRefusesANonEmptyDirectory(t *testing.T) {
	dir := backedMesh(t)
	file := filepath.Join(t.TempDir(), "home.backup")
	if _, err := writeBackup(t, dir, file, testPassphrase); err != nil {
		t.Fatal(err)
	}
	restored := t.TempDir()
	if err := os.WriteFile(filepath.Join(restored, "keep"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := RestoreBackup(context.Background(), Restore{File: file, Dir: restored, Passphrase: testPassphrase, Now: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("restore into a directory not empty: %v", err)
	}
	entries, _ := os.ReadDir(restored)
	if body, _ := os.ReadFile(filepath.Join(restored, "keep")); len(entries) != 1 || string(body) != "mine" {
		t.Fatalf("the directory changed: %d entries, keep holds %q", len(entries), body)
	}
}

// A passphrase shorter than MinPassphrase is refused, and no file is
// written; so is a directory that holds no controller.
func TestBackupRefusesAShortPassphraseAndNoMesh(t *testing.T) {
	dir := backedMesh(t)
	file := filepath.Join(t.TempDir(), "home.backup")
	if _, err := writeBackup(t, dir, file, "short"); err == nil || !strings.Contains(err.Error(), "at least 12") {
		t.Fatalf("backup with a short passphrase: %v", err)
	}
	if _, err := writeBackup(t, t.TempDir(), file, testPassphrase); err == nil || !strings.Contains(err.Error(), "holds no mesh") {
		t.Fatalf("backup of no mesh: %v", err)
	}
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused backup wrote %s: %v", file, err)
	}
}

// A backup cut short is refused, and what was written is removed.
func TestRestoreRefusesABackupCutShort(t *testing.T) {
	dir := backedMesh(t)
	file := filepath.Join(t.TempDir(), "home.backup")
	if _, err := writeBackup(t, dir, file, testPassphrase); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(file)
	if err := os.WriteFile(file, raw[:len(raw)*2/3], 0o600); err != nil {
		t.Fatal(err)
	}
	restored := t.TempDir()
	if _, err := RestoreBackup(context.Background(), Restore{File: file, Dir: restored, Passphrase: testPassphrase, Now: time.Now()}); err == nil {
		t.Fatal("a backup cut short was restored")
	}
	if entries, _ := os.ReadDir(restored); len(entries) != 0 {
		t.Fatalf("a refused restore left %d entries", len(entries))
	}
}
