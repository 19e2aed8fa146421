package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
)

// TestBackupRestoredTakesOverTheFleet: a backup taken while the
// controller runs, restored into a new directory after the controller is
// gone, runs with mesh controller --dir and nothing else (the bus address
// and the flags kept in it), reads the same modules and nodes, and takes
// over the fleet: beta, which applied a push made after the backup,
// takes the restored controller's declaration (numbered past any it
// saw) and serves the backup's secret again, opened by the at-rest key
// the backup carried; the next push is numbered above the old ones. The
// backup file holds neither the secret nor a key in plain; a wrong
// passphrase writes nothing; a directory not empty is refused.
func TestBackupRestoredTakesOverTheFleet(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "a mesh backed up, stopped, restored and converged again")
	m := newMesh(t, "--root", t.TempDir())
	betaRoot := t.TempDir()
	m.join(t, "beta", "--root", betaRoot)
	mod := t.TempDir()
	os.WriteFile(filepath.Join(mod, "module.json"), []byte(`{"name": "vault", "version": "1",
		"settings": [{"name": "token", "type": "string", "required": true, "secret": true}],
		"resources": [{"file": {"path": "/etc/vault/token", "content": "token=${token}\n"}}]}`), 0o644)
	mustRun(t, "module", "register", "--dir", m.dir, mod)
	secret := "BackedSecret-" + strings.Repeat("8", 12)
	mustRun(t, "assign", "--dir", m.dir, "--set", "token="+secret, "vault", "beta")
	if o, code := pushJSON(t, m.dir, "beta"); code != 0 {
		t.Fatalf("push: %+v", o)
	}
	dest := filepath.Join(betaRoot, "etc/vault/token")
	modules := mustRun(t, "module", "list", "--dir", m.dir)
	nodes := m.nodeNames(t)

	pass := filepath.Join(t.TempDir(), "pass")
	os.WriteFile(pass, []byte("correct horse battery staple\n"), 0o600)
	file := filepath.Join(t.TempDir(), "test.backup")
	mustRun(t, "backup", "--dir", m.dir, "--passphrase-file", pass, file)
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, plain := range []string{secret, "-----BEGIN", "PRIVATE KEY"} {
		if bytes.Contains(raw, []byte(plain)) {
			t.Errorf("the backup holds %q in plain", plain)
		}
	}

	// A push after the backup, which the restored store never saw.
	mustRun(t, "assign", "--dir", m.dir, "--set", "token="+secret+"-later", "vault", "beta")
	if o, code := pushJSON(t, m.dir, "beta"); code != 0 {
		t.Fatalf("push after the backup: %+v", o)
	}
	if got, _ := os.ReadFile(dest); string(got) != "token="+secret+"-later\n" {
		t.Fatalf("beta holds %q after the later push", got)
	}
	seen := nodeShow(t, m.dir, "beta").AppliedSeq
	m.d.stop(t)

	restored := filepath.Join(t.TempDir(), "ctl")
	wrong := filepath.Join(t.TempDir(), "wrong")
	os.WriteFile(wrong, []byte("not the passphrase at all\n"), 0o600)
	if _, errOut, code := runMesh(t, "restore", "--dir", restored, "--passphrase-file", wrong, file); code != 1 || !strings.Contains(errOut, "passphrase does not open") {
		t.Fatalf("restore with a wrong passphrase: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(restored); !os.IsNotExist(err) {
		t.Fatalf("a restore with a wrong passphrase made %s: %v", restored, err)
	}
	if _, errOut, code := runMesh(t, "restore", "--dir", m.dir, "--passphrase-file", pass, file); code != 1 || !strings.Contains(errOut, "is not empty") {
		t.Fatalf("restore over the old directory: exit %d: %s", code, errOut)
	}
	mustRun(t, "restore", "--dir", restored, "--passphrase-file", pass, file)
	d := start(t, "controller", "--dir", restored)
	waitReady(t, d, restored)

	if got := mustRun(t, "module", "list", "--dir", restored); got != modules {
		t.Errorf("modules after the restore:\n%s\nwant\n%s", got, modules)
	}
	if got := (&testMesh{dir: restored}).nodeNames(t); got != nodes {
		t.Errorf("nodes after the restore: %s, want %s", got, nodes)
	}
	// beta reconnects to the same bus address and takes the restored
	// declaration: the backup's value, numbered past the later push.
	poll.Until(t, 60*time.Second, "beta serves the backup's secret again", func() error {
		d.alive(t)
		got, _ := os.ReadFile(dest)
		n := nodeShow(t, restored, "beta")
		if string(got) == "token="+secret+"\n" && n.AppliedSeq > seen && n.AppliedSeq == n.SentSeq {
			return nil
		}
		return fmt.Errorf("beta holds %q, applied %d, sent %d", got, n.AppliedSeq, n.SentSeq)
	})
	mustRun(t, "assign", "--dir", restored, "--set", "token="+secret+"-after", "vault", "beta")
	o, code := pushJSON(t, restored, "beta")
	if code != 0 {
		t.Fatalf("push after the restore: %+v", o)
	}
	if got, _ := os.ReadFile(dest); string(got) != "token="+secret+"-after\n" {
		t.Fatalf("beta holds %q after the push after the restore", got)
	}
	if n := nodeShow(t, restored, "beta"); n.SentSeq <= seen+1 || n.AppliedSeq != n.SentSeq {
		t.Fatalf("after the restore beta was sent %d and applied %d; before, it applied %d", n.SentSeq, n.AppliedSeq, seen)
	}
}
