package mesh

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// csrBody is a CSR request for names with key, its CSR PEM-encoded.
func csrBody(t *testing.T, key crypto.Signer, names ...string) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: names}, key)
	if err != nil {
		t.Fatal(err)
	}
	return mustJSON(t, spec.CSRRequest{CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})})
}

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// askCSR sends body on node's CSR subject as nc (the node's own
// connection) and reads the answer.
func askCSR(t *testing.T, nc *nats.Conn, node string, body []byte) (spec.CSRResult, error) {
	t.Helper()
	m, err := nc.Request(spec.NodeSubject(node, spec.KindCSR), body, 10*time.Second)
	if err != nil {
		t.Fatalf("CSR request: %v", err)
	}
	var res spec.CSRResult
	err = spec.DecodeReply(m.Data, &res)
	return res, err
}

func parseChain(t *testing.T, chain []byte) []*x509.Certificate {
	t.Helper()
	var certs []*x509.Certificate
	for rest := chain; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	return certs
}

// opensslVerify runs openssl verify -CAfile roots.pem -untrusted
// intermediate.pem leaf.pem.
func opensslVerify(t *testing.T, root, inter, leaf *x509.Certificate) (string, bool) {
	t.Helper()
	dir := t.TempDir()
	for name, c := range map[string]*x509.Certificate{"roots.pem": root, "intermediate.pem": inter, "leaf.pem": leaf} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command("openssl", "verify", "-CAfile", filepath.Join(dir, "roots.pem"),
		"-untrusted", filepath.Join(dir, "intermediate.pem"), filepath.Join(dir, "leaf.pem")).CombinedOutput()
	return string(out), err == nil && strings.Contains(string(out), ": OK")
}

func goVerify(root, inter, leaf *x509.Certificate, name string) error {
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	inters.AddCert(inter)
	_, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inters})
	return err
}

// certMesh sets up node beta, joined, serving route web with the public
// name x.example.org, and alpha (genesis) serving route api; it returns
// beta's own bus connection.
func certMesh(t *testing.T, c *Controller, db *store.DB) *nats.Conn {
	t.Helper()
	ctx := context.Background()
	key := joinWithKey(t, c, "beta")
	nc, err := busConn(t, c, key, spec.NodeInbox("beta"), nil)
	if err != nil {
		t.Fatal(err)
	}
	web := spec.Module{Name: "web", Version: "1", Routes: []spec.Route{{Name: "web", Port: 443, Public: []string{"x.example.org"}}}}
	api := spec.Module{Name: "api", Version: "1", Routes: []spec.Route{{Name: "api", Port: 443}}}
	if _, err := db.RegisterModules(ctx, []spec.Module{web, api}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, a := range [][2]string{{"web", "beta"}, {"api", "alpha"}} {
		if err := db.Assign(ctx, a[0], a[1], nil, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return nc
}

// lastAudit is the last audit entry.
func lastAudit(t *testing.T, db *store.DB) store.AuditEntry {
	t.Helper()
	es, err := db.AuditSince(context.Background(), time.Time{}, 100000)
	if err != nil || len(es) == 0 {
		t.Fatalf("no audit entry: %v", err)
	}
	return es[len(es)-1]
}

func certCount(t *testing.T, db *store.DB) int {
	t.Helper()
	cs, err := db.Certs(context.Background(), 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return len(cs)
}

// TestCSRSignsOnlyTheNodesOwnNames: a node's CSR on its own subject is
// signed for its own names (NODE.internal, its routes, its public name),
// and the chain verifies with openssl and Go; a CSR for another node's
// name or route, for a name it does not serve, with a weak key, with a
// signature that does not verify, that does not parse, or oversized, is
// refused naming why, audited as the node's, counted in
// mesh_csr_refused_total, and nothing is issued.
func TestCSRSignsOnlyTheNodesOwnNames(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	nc := certMesh(t, c, db)
	if _, err := c.certs.addCADomain(context.Background(), spec.CADomainAddRequest{Domain: "example.org"}); err != nil {
		t.Fatal(err)
	}

	issued := metric(t, c, "mesh_certs_issued_total")
	names := []string{"beta.internal", "web.beta.internal", "x.example.org"}
	res, err := askCSR(t, nc, "beta", csrBody(t, ecKey(t), names...))
	if err != nil {
		t.Fatalf("beta's CSR for its own names: %v", err)
	}
	chain := parseChain(t, res.Chain)
	if len(chain) != 2 || !chain[1].Equal(c.deps.CA.Intermediate()) {
		t.Fatalf("the reply's chain holds %d certificates, want the leaf and the current intermediate", len(chain))
	}
	leaf := chain[0]
	if !slices.Equal(leaf.DNSNames, names) || len(leaf.IPAddresses) != 0 {
		t.Errorf("leaf names %v %v, want exactly %v", leaf.DNSNames, leaf.IPAddresses, names)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("leaf usages %v, want serverAuth", leaf.ExtKeyUsage)
	}
	if want := clk.Now().Add(DefaultCertLifetime).Truncate(time.Second); !leaf.NotAfter.Equal(want) {
		t.Errorf("leaf NotAfter %v, want %v (30 days)", leaf.NotAfter, want)
	}
	if out, ok := opensslVerify(t, c.deps.CA.Root(), chain[1], leaf); !ok {
		t.Errorf("openssl does not verify the leaf issued:\n%s", out)
	}
	for _, n := range names {
		if err := goVerify(c.deps.CA.Root(), chain[1], leaf, n); err != nil {
			t.Errorf("Go does not verify the leaf for %s: %v", n, err)
		}
	}
	cs, _ := db.Certs(context.Background(), 0, 10)
	if len(cs) != 1 || cs[0].Node != "beta" || cs[0].Serial != ca.SerialOf(leaf) || !slices.Equal(cs[0].Names, names) || !cs[0].NotAfter.Equal(leaf.NotAfter) {
		t.Errorf("the store records %+v, want the leaf issued to beta", cs)
	}
	if e := lastAudit(t, db); e.Operator != "node:beta" || e.Verb != CSRVerb || e.Outcome != "ok" || !strings.Contains(e.Args, ca.SerialOf(leaf)) {
		t.Errorf("audit %+v, want beta's CSR, ok, with the serial", e)
	}
	if got := metric(t, c, "mesh_certs_issued_total") - issued; got != 1 {
		t.Errorf("mesh_certs_issued_total grew by %d, want 1", got)
	}

	rsaKey := func(bits int) crypto.Signer {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	tampered := func() []byte {
		der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{"beta.internal"}}, ecKey(t))
		der[len(der)-5] ^= 0xff
		return mustJSON(t, spec.CSRRequest{CSR: der})
	}
	for _, tc := range []struct {
		name string
		body []byte
		kind string
		want string
	}{
		{"another node's name", csrBody(t, ecKey(t), "beta.internal", "alpha.internal"), spec.ReplyRefused, `node "beta" may not hold alpha.internal`},
		{"a route another node serves", csrBody(t, ecKey(t), "api.alpha.internal"), spec.ReplyRefused, "may not hold api.alpha.internal"},
		{"a route it does not serve", csrBody(t, ecKey(t), "api.beta.internal"), spec.ReplyRefused, "may not hold api.beta.internal"},
		{"a public name not assigned to it", csrBody(t, ecKey(t), "y.example.org"), spec.ReplyRefused, "may not hold y.example.org"},
		{"an IP address", func() []byte {
			der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{"beta.internal"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, ecKey(t))
			return mustJSON(t, spec.CSRRequest{CSR: der})
		}(), spec.ReplyRefused, "DNS names only"},
		{"RSA 1024", csrBody(t, rsaKey(1024), "beta.internal"), spec.ReplyRefused, "RSA key has 1024 bits"},
		{"a signature that does not verify", tampered(), spec.ReplyCaller, "signature does not verify"},
		{"garbage", mustJSON(t, spec.CSRRequest{CSR: []byte("not a CSR")}), spec.ReplyCaller, "does not parse"},
		{"not JSON", []byte("hello"), spec.ReplyCaller, "malformed certificate request"},
		{"oversized", mustJSON(t, spec.CSRRequest{CSR: make([]byte, spec.MaxCSR)}), spec.ReplyCaller, "more than the 16384"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused, certs := metric(t, c, "mesh_csr_refused_total"), certCount(t, db)
			_, err := askCSR(t, nc, "beta", tc.body)
			var re *spec.ReplyError
			if !errors.As(err, &re) || re.Kind != tc.kind || !strings.Contains(re.Message, tc.want) {
				t.Fatalf("answer %v, want a %s error saying %q", err, tc.kind, tc.want)
			}
			if got := metric(t, c, "mesh_csr_refused_total") - refused; got != 1 {
				t.Errorf("mesh_csr_refused_total grew by %d, want 1", got)
			}
			if got := certCount(t, db); got != certs {
				t.Errorf("%d certificate(s) recorded, want %d: nothing issued", got, certs)
			}
			if e := lastAudit(t, db); e.Operator != "node:beta" || e.Verb != CSRVerb || !strings.Contains(e.Outcome, tc.want) {
				t.Errorf("audit %+v, want beta's refused CSR saying %q", e, tc.want)
			}
		})
	}
}

// TestCSRPublicNameNeedsADomain: a public name the node serves is signed
// only once the operator declared a domain over it.
func TestCSRPublicNameNeedsADomain(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	nc := certMesh(t, c, db)
	_, err := askCSR(t, nc, "beta", csrBody(t, ecKey(t), "x.example.org"))
	var re *spec.ReplyError
	if !errors.As(err, &re) || re.Kind != spec.ReplyRefused || !strings.Contains(re.Message, "x.example.org is not under a domain the mesh signs for") {
		t.Fatalf("a public name before its domain is declared: %v, want a refusal naming it", err)
	}
	if _, err := c.certs.addCADomain(context.Background(), spec.CADomainAddRequest{Domain: "example.org"}); err != nil {
		t.Fatal(err)
	}
	if _, err := askCSR(t, nc, "beta", csrBody(t, ecKey(t), "x.example.org")); err != nil {
		t.Fatalf("a public name after its domain is declared: %v", err)
	}
}

// TestCSRReadFailureIsNotNothing: when what the node may hold cannot be
// read, its CSR is the controller's failure, not a refusal of a name it
// "may not hold" (invariant 1).
func TestCSRReadFailureIsNotNothing(t *testing.T) {
	t.Parallel()
	var fs *failingStore
	c, db := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store {
		fs = &failingStore{DB: db, node: "beta"}
		return fs
	})
	nc := certMesh(t, c, db)
	fs.fail.Store(true)
	refused := metric(t, c, "mesh_csr_refused_total")
	_, err := askCSR(t, nc, "beta", csrBody(t, ecKey(t), "web.beta.internal"))
	var re *spec.ReplyError
	if !errors.As(err, &re) || re.Kind != spec.ReplyFailed || !strings.Contains(re.Message, errUnreachable.Error()) || strings.Contains(re.Message, "may not hold") {
		t.Fatalf("a CSR while beta's assignments cannot be read: %v, want the controller's failure naming the read", err)
	}
	if got := metric(t, c, "mesh_csr_refused_total") - refused; got != 0 {
		t.Errorf("a failure was counted as %d refusal(s)", got)
	}
	fs.fail.Store(false)
	if _, err := askCSR(t, nc, "beta", csrBody(t, ecKey(t), "web.beta.internal")); err != nil {
		t.Errorf("once the read works again: %v", err)
	}
}

// TestCSRAnsweredOnlyUnderTheNodesInbox: a CSR whose reply subject is not
// under the node's own inbox is dropped: answered nowhere, signed for no
// one, not audited, counted in mesh_replies_refused_total.
func TestCSRAnsweredOnlyUnderTheNodesInbox(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	nc := certMesh(t, c, db)
	own := spec.NodeInbox("beta")
	body := csrBody(t, ecKey(t), "beta.internal")
	reply := tryReflect(t, c, db, nc, own, spec.NodeSubject("beta", spec.KindCSR), same(foreign(own), body), body, 1)
	if reply.Error != "" || len(reply.Result) == 0 {
		t.Errorf("the CSR with its own inbox: %+v, want a chain", reply)
	}
	if n := certCount(t, db); n != 1 {
		t.Errorf("%d certificates issued, want 1: only the request answered under its own inbox", n)
	}
}
