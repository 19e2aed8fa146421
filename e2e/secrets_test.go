package e2e

import (
	"bytes"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretOnlyWhereDeclared: a secret setting's value, assigned to a
// joined host and pushed, is in its declared file on that host and nowhere
// else: not in the controller's directory (its store, write-ahead log and
// JetStream files), not in either host's state directory, not in a
// daemon's output nor the audit, in plain or base64; a push that changes
// nothing sends nothing.
func TestSecretOnlyWhereDeclared(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--root", t.TempDir())
	betaRoot := t.TempDir()
	betaDir, beta := m.join(t, "beta", "--root", betaRoot)
	mod := t.TempDir()
	os.WriteFile(filepath.Join(mod, "module.json"), []byte(`{"name": "vault", "version": "1",
		"settings": [{"name": "token", "type": "string", "required": true, "secret": true}],
		"resources": [{"file": {"path": "/etc/vault/token", "content": "token=${token}\n"}}]}`), 0o644)
	mustRun(t, "module", "register", "--dir", m.dir, mod)
	secret := "SuperSecret-" + strings.Repeat("7", 12)
	mustRun(t, "assign", "--dir", m.dir, "--set", "token="+secret, "vault", "beta")
	if o, code := pushJSON(t, m.dir, "beta"); code != 0 {
		t.Fatalf("push: %+v", o)
	}
	dest := filepath.Join(betaRoot, "etc/vault/token")
	got, err := os.ReadFile(dest)
	if err != nil || string(got) != "token="+secret+"\n" {
		t.Fatalf("the declared file holds %q, %v", got, err)
	}
	if info, err := os.Stat(dest); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the declared file: %v %v, want mode 0600", info.Mode(), err)
	}
	holds := func(b []byte) bool { return holdsAny(b, encodedForms(secret)) }
	for _, dir := range []string{m.dir, betaDir} {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && holds(b) {
				t.Errorf("%s holds the secret", p)
			}
			return nil
		})
	}
	audit, _, _ := runMesh(t, "audit", "--dir", m.dir, "--json")
	for what, out := range map[string]string{"the controller's output": m.d.out.String(), "beta's output": beta.out.String(), "the audit": audit} {
		if holds([]byte(out)) {
			t.Errorf("%s holds the secret", what)
		}
	}
	out, _, code := runMesh(t, "push", "--dir", m.dir, "beta")
	if code != 0 || !strings.Contains(out, "beta: unchanged, not sent") {
		t.Fatalf("a push that changes nothing: exit %d\n%s", code, out)
	}

	// The controller killed and started again with no flags: it keeps its
	// at-rest key, finds the sealed bytes in beta's last declaration (a
	// push changes nothing), and seals a new value to beta.
	m.d.kill9(t)
	m.d = start(t, "controller", "--dir", m.dir)
	m.addrs = waitReady(t, m.d, m.dir)
	out, _, code = runMesh(t, "push", "--dir", m.dir, "beta")
	if code != 0 || !strings.Contains(out, "beta: unchanged, not sent") {
		t.Fatalf("after a restart, a push that changes nothing: exit %d\n%s", code, out)
	}
	mustRun(t, "assign", "--dir", m.dir, "--set", "token="+secret+"-2", "vault", "beta")
	if o, code := pushJSON(t, m.dir, "beta"); code != 0 {
		t.Fatalf("after a restart, a push of a new value: %+v", o)
	}
	if got, err := os.ReadFile(dest); err != nil || string(got) != "token="+secret+"-2\n" {
		t.Fatalf("after a restart, the declared file holds %q, %v", got, err)
	}
}

// encodedForms are the forms a secret value may be found in: plain, and
// base64 in the standard and URL alphabets (JSON writes bytes in the
// standard one) at each of the three offsets the value may start at in
// the bytes encoded, each cut to the characters the value alone fixes,
// so that it is found inside the encoding of a longer text holding it.
func encodedForms(value string) [][]byte {
	forms := [][]byte{[]byte(value)}
	for k := 0; k < 3; k++ {
		b := append(make([]byte, k), value...)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			s := enc.EncodeToString(b)
			// The first group holds the k bytes before the value; the
			// last, unless full, the bytes after it.
			start, end := 0, len(s)
			if k > 0 {
				start = 4
			}
			if len(b)%3 != 0 {
				end -= 4
			}
			if end-start >= 8 {
				forms = append(forms, []byte(s[start:end]))
			}
		}
	}
	return forms
}

// holdsAny says whether b holds any of forms.
func holdsAny(b []byte, forms [][]byte) bool {
	for _, f := range forms {
		if bytes.Contains(b, f) {
			return true
		}
	}
	return false
}
