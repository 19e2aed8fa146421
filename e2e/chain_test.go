package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// keptChain is the CA chain a host keeps in its state, PEM.
func keptChain(t *testing.T, hostDir string) string {
	t.Helper()
	var st struct {
		CAChain string `json:"ca_chain"`
	}
	if err := json.Unmarshal(must(os.ReadFile(filepath.Join(hostDir, "host", "state.json"))), &st); err != nil {
		t.Fatal(err)
	}
	return st.CAChain
}

// opensslVerifyWith is openssl verify -CAfile roots -untrusted untrusted
// leaf.pem, with extra options first: its output and whether it said OK.
func opensslVerifyWith(t *testing.T, roots, untrusted string, leaf *x509.Certificate, extra ...string) (string, bool) {
	t.Helper()
	leafPath := filepath.Join(t.TempDir(), "leaf.pem")
	if err := os.WriteFile(leafPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"verify"}, extra...), "-CAfile", roots, "-untrusted", untrusted, leafPath)
	out, err := exec.Command("openssl", args...).CombinedOutput()
	return string(out), err == nil && strings.Contains(string(out), ": OK")
}

// signedByKept is a leaf for name signed with the key of the intermediate
// whose serial is serial (a reissued one keeps it as intermediates/SERIAL.key):
// what the controller never signs.
func signedByKept(t *testing.T, caDir, serial, name string) *x509.Certificate {
	t.Helper()
	inter := mustParseCert(t, must(os.ReadFile(filepath.Join(caDir, "intermediate.crt"))))
	if ca.SerialOf(inter) != serial {
		t.Fatalf("intermediate.crt is %s, not %s", ca.SerialOf(inter), serial)
	}
	block, _ := pem.Decode(must(os.ReadFile(filepath.Join(caDir, "intermediates", serial+".key"))))
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(98), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, inter, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return leaf
}

// TestDomainAddHandsHostsTheNewChain, with the built binary and openssl:
// every host holds the intermediate its declaration carried; a leaf is
// issued to beta through its CSR subject; mesh ca domain add example.org
// replaces the intermediate, and status says each node holds the old one,
// pending (a problem, not a failure) until the push; after it, the hosts'
// facts and status name the new intermediate, and beta's state keeps its
// chain; the old leaf still verifies with the old intermediate until it
// expires; a leaf for the public name assigned to beta verifies against the
// chain beta holds, and one under an undeclared domain signed directly by
// the new intermediate's key does not.
func TestDomainAddHandsHostsTheNewChain(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--root", t.TempDir())
	betaDir, _ := m.join(t, "beta", "--root", t.TempDir())
	caDir := filepath.Join(m.dir, "controller", "ca")
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, []byte(mustRun(t, "ca", "roots", "--dir", m.dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	// beta serves hello.example.org: a public name assigned to it.
	mustRun(t, "module", "register", "--dir", m.dir, example("hello"))
	mustRun(t, "assign", "--dir", m.dir, "--set", "token=t", "--set", "domain=example.org", "hello", "beta")
	push(t, m.dir)
	first := ca.SerialOf(mustParseCert(t, must(os.ReadFile(filepath.Join(caDir, "intermediate.crt")))))
	holds := func(serial string) {
		t.Helper()
		poll.Until(t, 20*time.Second, "every node saying it holds intermediate "+serial, func() error {
			st, _ := statusOf(t, m.dir)
			var held []string
			for _, n := range st.Nodes {
				held = append(held, n.Node+": "+n.Intermediate)
			}
			if st.Intermediate == serial && nodeStatusOf(st, "alpha").Intermediate == serial && nodeStatusOf(st, "beta").Intermediate == serial {
				return nil
			}
			return fmt.Errorf("the mesh signs with %s; %s", st.Intermediate, strings.Join(held, ", "))
		})
	}
	holds(first)

	nc, _, err := nodeConn(t, m, betaDir)
	if err != nil {
		t.Fatal(err)
	}
	old, err := askCSR(t, nc, "beta", "beta.internal")
	if err != nil {
		t.Fatalf("beta's CSR for beta.internal: %v", err)
	}
	_, err = askCSR(t, nc, "beta", "hello.example.org")
	var re *spec.ReplyError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "not under a domain the mesh signs for") {
		t.Fatalf("beta's CSR for hello.example.org before the domain is declared: %v", err)
	}

	out := mustRun(t, "ca", "domain", "add", "--dir", m.dir, "example.org")
	second := ca.SerialOf(mustParseCert(t, must(os.ReadFile(filepath.Join(caDir, "intermediate.crt")))))
	if second == first || !strings.Contains(out, "intermediate "+second+" now signs") {
		t.Fatalf("mesh ca domain add: %q; intermediate %s, was %s", out, second, first)
	}
	// Until the push, each node holds the old intermediate: pending, a
	// problem that takes the all-clear away, not a failure.
	st, code := statusJSON(t, m.dir)
	for _, node := range []string{"alpha", "beta"} {
		ns := nodeStatusOf(st, node)
		want := node + " holds intermediate " + first + ", the mesh signs with " + second + " now: mesh push " + node + " hands it the new chain"
		if code == 0 || !ns.Pending || len(ns.Failures) != 0 || !strings.Contains(strings.Join(st.Problems, "\n"), want) {
			t.Errorf("status before the push: exit %d, %s pending %v, failures %q, problems %q", code, node, ns.Pending, ns.Failures, st.Problems)
		}
	}
	text, _, _ := runMesh(t, "status", "--dir", m.dir)
	if !strings.Contains(text, "~ beta holds intermediate "+first+", the mesh signs with "+second+": pending until pushed") {
		t.Errorf("mesh status does not tell beta's old intermediate:\n%s", text)
	}

	push(t, m.dir)
	holds(second)
	if st, code := statusJSON(t, m.dir); code != 0 {
		t.Errorf("status after the push is not all clear: %q", st.Problems)
	}
	if show := mustRun(t, "node", "show", "--dir", m.dir, "beta"); !strings.Contains(show, "holds intermediate "+second) {
		t.Errorf("mesh node show beta does not name the new intermediate:\n%s", show)
	}
	chainPath := filepath.Join(t.TempDir(), "chain.pem")
	if err := os.WriteFile(chainPath, []byte(keptChain(t, betaDir)), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := ca.ParseChain([]byte(keptChain(t, betaDir)), mustParseCert(t, must(os.ReadFile(roots))), time.Now())
	if err != nil || len(held) != 1 || ca.SerialOf(held[0]) != second {
		t.Fatalf("beta keeps %d intermediate(s) (%v), want %s alone", len(held), err, second)
	}

	// The old leaf still verifies with the intermediate that signed it,
	// until it expires.
	oldInter := filepath.Join(t.TempDir(), "old-intermediate.pem")
	if err := os.WriteFile(oldInter, must(os.ReadFile(filepath.Join(caDir, "intermediates", first+".crt"))), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, ok := opensslVerifyWith(t, roots, oldInter, old[0]); !ok {
		t.Errorf("the leaf signed before the add no longer verifies:\n%s", out)
	}
	after := fmt.Sprint(old[0].NotAfter.Add(time.Hour).Unix())
	if out, ok := opensslVerifyWith(t, roots, oldInter, old[0], "-attime", after); ok || !strings.Contains(out, "expired") {
		t.Errorf("the old leaf verifies after it expired: ok %v\n%s", ok, out)
	}

	// The public name assigned to beta, signed now by the new intermediate
	// only, verifies against the chain beta holds; a name under a domain
	// nobody declared, signed with that intermediate's own key, does not.
	fresh, err := askCSR(t, nc, "beta", "hello.example.org")
	if err != nil {
		t.Fatalf("beta's CSR for hello.example.org after the add: %v", err)
	}
	if ca.SerialOf(fresh[1]) != second {
		t.Errorf("hello.example.org's leaf is signed by %s, not the new intermediate %s", ca.SerialOf(fresh[1]), second)
	}
	if out, ok := opensslVerifyWith(t, roots, chainPath, fresh[0]); !ok {
		t.Errorf("hello.example.org's leaf does not verify against beta's chain:\n%s", out)
	}
	outsider := signedByKept(t, caDir, second, "x.example.net")
	if out, ok := opensslVerifyWith(t, roots, chainPath, outsider); ok || !strings.Contains(out, "permitted subtree violation") {
		t.Errorf("a leaf for x.example.net: ok %v, want a permitted subtree violation:\n%s", ok, out)
	}
}
