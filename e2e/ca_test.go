package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// askCSR sends a CSR for names as the node nc is, and returns the chain
// it is answered with.
func askCSR(t *testing.T, nc *nats.Conn, node string, names ...string) ([]*x509.Certificate, error) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: names}, key)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(spec.CSRRequest{CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})})
	m, err := nc.Request(spec.NodeSubject(node, spec.KindCSR), body, 10*time.Second)
	if err != nil {
		t.Fatalf("CSR request: %v", err)
	}
	var res spec.CSRResult
	if err := spec.DecodeReply(m.Data, &res); err != nil {
		return nil, err
	}
	var chain []*x509.Certificate
	for rest := res.Chain; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return chain, nil
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, c)
	}
}

// opensslVerify is openssl verify -CAfile roots.pem -untrusted
// intermediate.pem leaf.pem: its output, and whether it said OK.
func opensslVerify(t *testing.T, roots string, inter, leaf *x509.Certificate) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	interPath, leafPath := filepath.Join(dir, "intermediate.pem"), filepath.Join(dir, "leaf.pem")
	os.WriteFile(interPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: inter.Raw}), 0o644)
	os.WriteFile(leafPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw}), 0o644)
	out, err := exec.Command("openssl", "verify", "-CAfile", roots, "-untrusted", interPath, leafPath).CombinedOutput()
	return string(out), err == nil && strings.Contains(string(out), ": OK")
}

// signedDirectly is a leaf for name signed with the intermediate's own key
// as genesis wrote it: what the controller never signs.
func signedDirectly(t *testing.T, caDir string, name string) (*x509.Certificate, *x509.Certificate) {
	t.Helper()
	inter, err := ca.ParseCert(must(os.ReadFile(filepath.Join(caDir, "intermediate.crt"))))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(must(os.ReadFile(filepath.Join(caDir, "intermediate.key"))))
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(99), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, inter, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return leaf, inter
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestCertificates, with the built binary: genesis's intermediate is
// constrained (a leaf for a name outside, signed with its key, fails
// openssl verify with a permitted subtree violation); a node's CSR for its
// own name is signed and verifies against the mesh's roots, one for another
// node's name is refused, audited and counted; mesh ca domain add issues a
// new intermediate, refuses bad domains and a duplicate with nothing
// changed; the old leaf still verifies; mesh ca certs lists the leaves;
// with --cert-lifetime 72h (kept in config.yaml) status is not all clear;
// the mesh restarted on the new intermediate still takes its hosts and
// signs with the kept lifetime.
func TestCertificates(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--cert-lifetime", "72h", "--docker", "none")
	m.join(t, "beta", "--docker", "none")
	caDir := filepath.Join(m.dir, "controller", "ca")
	if got := configOf(t, m.dir); !strings.Contains(got, "cert-lifetime: 72h0m0s\n") {
		t.Errorf("config.yaml does not keep --cert-lifetime:\n%s", got)
	}
	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, []byte(mustRun(t, "ca", "roots", "--dir", m.dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	list := mustRun(t, "ca", "domain", "list", "--dir", m.dir)
	if !regexp.MustCompile(`(?m)^no public domain declared.*\nintermediate [0-9a-f]+ signs names under: internal, mesh-bus\n$`).MatchString(list) {
		t.Errorf("mesh ca domain list after genesis:\n%s", list)
	}

	outsider, genesisInter := signedDirectly(t, caDir, "x.example.org")
	if out, ok := opensslVerify(t, roots, genesisInter, outsider); ok || !strings.Contains(out, "permitted subtree violation") {
		t.Errorf("openssl on a leaf outside the constraints: ok %v, want a permitted subtree violation:\n%s", ok, out)
	}

	nc, _, err := nodeConn(t, m, m.dir)
	if err != nil {
		t.Fatal(err)
	}
	old, err := askCSR(t, nc, "alpha", "alpha.internal")
	if err != nil {
		t.Fatalf("alpha's CSR for alpha.internal: %v", err)
	}
	if out, ok := opensslVerify(t, roots, old[1], old[0]); !ok {
		t.Errorf("openssl does not verify alpha's leaf against mesh ca roots:\n%s", out)
	}
	if d := old[0].NotAfter.Sub(old[0].NotBefore); d < 72*time.Hour || d > 73*time.Hour {
		t.Errorf("alpha's leaf lives %s, want the 72h of --cert-lifetime", d)
	}
	_, err = askCSR(t, nc, "alpha", "beta.internal")
	var re *spec.ReplyError
	if !errors.As(err, &re) || re.Kind != spec.ReplyRefused || !strings.Contains(re.Message, `node "alpha" may not hold beta.internal`) {
		t.Errorf("alpha's CSR for beta.internal: %v, want a refusal naming it", err)
	}
	if got := m.metric(t, "mesh_csr_refused_total"); got != 1 {
		t.Errorf("mesh_csr_refused_total = %d, want 1", got)
	}
	audit := mustRun(t, "audit", "--dir", m.dir, "--json")
	if !strings.Contains(audit, `"operator": "node:alpha"`) || !strings.Contains(audit, `may not hold beta.internal`) {
		t.Errorf("mesh audit does not show alpha's refused CSR:\n%s", audit)
	}

	// Bad domains: refused, exit 2, nothing changed.
	file := must(os.ReadFile(filepath.Join(caDir, "intermediate.crt")))
	for _, d := range []string{"internal", ".internal", "alpha.internal", "not a domain", "Example.org"} {
		if _, errOut, code := runMesh(t, "ca", "domain", "add", "--dir", m.dir, d); code != 2 || !strings.Contains(errOut, d) {
			t.Errorf("mesh ca domain add %q: exit %d: %s", d, code, errOut)
		}
	}
	if got := mustRun(t, "ca", "domain", "list", "--dir", m.dir); got != list {
		t.Errorf("a refused add changed the list:\n%s", got)
	}
	if !bytes.Equal(must(os.ReadFile(filepath.Join(caDir, "intermediate.crt"))), file) {
		t.Error("a refused add changed intermediate.crt")
	}

	out := mustRun(t, "ca", "domain", "add", "--dir", m.dir, "example.org")
	if !regexp.MustCompile(`^example.org declared: intermediate [0-9a-f]+ now signs names under it\n$`).MatchString(out) {
		t.Errorf("mesh ca domain add example.org printed %q", out)
	}
	after := must(os.ReadFile(filepath.Join(caDir, "intermediate.crt")))
	if _, errOut, code := runMesh(t, "ca", "domain", "add", "--dir", m.dir, "example.org"); code != 1 || !strings.Contains(errOut, "example.org is already declared") {
		t.Errorf("a second add of example.org: exit %d: %s", code, errOut)
	}
	if !bytes.Equal(must(os.ReadFile(filepath.Join(caDir, "intermediate.crt"))), after) {
		t.Error("a refused duplicate changed intermediate.crt")
	}
	var domains spec.CADomainListResult
	if err := json.Unmarshal([]byte(mustRun(t, "ca", "domain", "list", "--dir", m.dir, "--json")), &domains); err != nil {
		t.Fatal(err)
	}
	if len(domains.Domains) != 1 || domains.Domains[0].Name != "example.org" || !domains.Domains[0].Signed ||
		strings.Join(domains.Permitted, ",") != "internal,mesh-bus,example.org" {
		t.Errorf("mesh ca domain list --json = %+v", domains)
	}
	// The leaf signed before still verifies, with the intermediate kept.
	kept, err := ca.ParseCert(must(os.ReadFile(filepath.Join(caDir, "intermediates", ca.SerialOf(genesisInter)+".crt"))))
	if err != nil || !kept.Equal(old[1]) {
		t.Fatalf("the replaced intermediate is not kept: %v", err)
	}
	if out, ok := opensslVerify(t, roots, kept, old[0]); !ok {
		t.Errorf("openssl no longer verifies the leaf signed before the add:\n%s", out)
	}
	fresh, err := askCSR(t, nc, "alpha", "alpha.internal")
	if err != nil {
		t.Fatal(err)
	}
	if !fresh[1].Equal(mustParseCert(t, after)) {
		t.Error("a leaf signed after the add is not signed by the new intermediate")
	}

	// mesh ca certs lists both leaves; a leaf living 72h is within a week
	// of expiring: status is not all clear and names it.
	certs := mustRun(t, "ca", "certs", "--dir", m.dir)
	for _, leaf := range []*x509.Certificate{old[0], fresh[0]} {
		if !strings.Contains(certs, "alpha  alpha.internal  "+leaf.NotAfter.UTC().Format(time.RFC3339)+"  "+ca.SerialOf(leaf)+"\n") {
			t.Errorf("mesh ca certs does not list leaf %s:\n%s", ca.SerialOf(leaf), certs)
		}
	}
	st, code := statusJSON(t, m.dir)
	if code == 0 || st.AllClear || !strings.Contains(strings.Join(nodeStatusOf(st, "alpha").Failures, "\n"), "certificate "+ca.SerialOf(fresh[0])+" for alpha.internal expires in 7") {
		t.Errorf("status with a leaf expiring in 72h: exit %d, failures %q", code, nodeStatusOf(st, "alpha").Failures)
	}

	// Started again: the bus's certificate now comes from the new
	// intermediate; beta's host (its own process, holding only the root)
	// connects again, and so do the CLI and a node; the kept lifetime
	// holds.
	m.d.stop(t)
	since := time.Now()
	d := start(t, "controller", "--dir", m.dir)
	m.addrs = waitReady(t, d, m.dir)
	poll.Until(t, 30*time.Second, "beta heard on the bus of the new intermediate", func() error {
		return heardAfter(t, m.dir, "beta", since)
	})
	nc2, _, err := nodeConn(t, m, m.dir)
	if err != nil {
		t.Fatalf("a node does not connect to the bus of the new intermediate: %v", err)
	}
	again, err := askCSR(t, nc2, "alpha", "alpha.internal")
	if err != nil {
		t.Fatal(err)
	}
	if d := again[0].NotAfter.Sub(again[0].NotBefore); d < 72*time.Hour || d > 73*time.Hour {
		t.Errorf("after the restart a leaf lives %s, want the kept 72h", d)
	}
}

func mustParseCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	c, err := ca.ParseCert(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func nodeStatusOf(st spec.StatusResult, node string) spec.NodeStatus {
	for _, n := range st.Nodes {
		if n.Node == node {
			return n
		}
	}
	return spec.NodeStatus{}
}
