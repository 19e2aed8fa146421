package ca_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
)

// meshDomains is what genesis constrains the intermediate to: the mesh's
// own names and the bus's.
var meshDomains = []string{"internal", "mesh-bus"}

func newConstrained(t *testing.T) (*ca.Authority, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := ca.Create(dir, "prod", time.Now(), meshDomains...)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return a, dir
}

// csrFor is a CSR for names with key.
func csrFor(t *testing.T, key crypto.Signer, names ...string) *x509.CertificateRequest {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: names}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ca.ParseCSR(der)
	if err != nil {
		t.Fatalf("ParseCSR: %v", err)
	}
	return csr
}

func p256(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signDirectly is a leaf for names signed with the intermediate's own key,
// read from the CA directory: what the authority refuses to sign, made
// anyway, to see that clients refuse it too.
func signDirectly(t *testing.T, dir string, inter *x509.Certificate, names ...string) *x509.Certificate {
	t.Helper()
	keyPath := filepath.Join(dir, "intermediates", ca.SerialOf(inter)+".key")
	if _, err := os.Stat(keyPath); err != nil {
		keyPath = filepath.Join(dir, "intermediate.key")
	}
	b, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	leafKey := p256(t)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, inter, &leafKey.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c
}

// opensslVerify runs openssl verify -CAfile roots.pem -untrusted
// intermediate.pem leaf.pem and returns its output and whether it said OK.
func opensslVerify(t *testing.T, root, inter, leaf *x509.Certificate, extra ...string) (string, bool) {
	t.Helper()
	tmp := t.TempDir()
	paths := map[string]*x509.Certificate{"roots.pem": root, "intermediate.pem": inter, "leaf.pem": leaf}
	for name, c := range paths {
		writePEM(t, filepath.Join(tmp, name), c.Raw)
	}
	args := append([]string{"verify"}, extra...)
	args = append(args, "-CAfile", filepath.Join(tmp, "roots.pem"), "-untrusted", filepath.Join(tmp, "intermediate.pem"), filepath.Join(tmp, "leaf.pem"))
	out, err := exec.Command("openssl", args...).CombinedOutput()
	return string(out), err == nil && strings.Contains(string(out), ": OK")
}

// goVerify is x509.Verify of leaf for name with root and inter, at at.
func goVerify(root, inter, leaf *x509.Certificate, name string, at time.Time) error {
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	inters.AddCert(inter)
	_, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inters, CurrentTime: at})
	return err
}

// TestConstrainedLeafVerifiesAndOutsiderDoesNot: the intermediate carries
// the constraints it was created with; a leaf it signs for a name under
// them verifies with openssl and Go; a leaf for a name outside them, signed
// with the intermediate's own key, verifies with neither, and the authority
// refuses to sign it.
func TestConstrainedLeafVerifiesAndOutsiderDoesNot(t *testing.T) {
	t.Parallel()
	a, dir := newConstrained(t)
	inter := readCert(t, filepath.Join(dir, "intermediate.crt"))
	if !slices.Equal(inter.PermittedDNSDomains, meshDomains) {
		t.Errorf("intermediate permits %v, want %v", inter.PermittedDNSDomains, meshDomains)
	}
	if got := a.Permitted(); !slices.Equal(got, meshDomains) {
		t.Errorf("Permitted() = %v, want %v", got, meshDomains)
	}

	leaf, err := a.SignCSR(csrFor(t, p256(t), "alpha.internal", "web.alpha.internal"), []string{"alpha.internal", "web.alpha.internal"}, time.Now(), time.Hour)
	if err != nil {
		t.Fatalf("SignCSR: %v", err)
	}
	if out, ok := opensslVerify(t, a.Root(), inter, leaf.Cert); !ok {
		t.Errorf("openssl does not verify a leaf under .internal:\n%s", out)
	}
	if err := goVerify(a.Root(), inter, leaf.Cert, "web.alpha.internal", time.Now()); err != nil {
		t.Errorf("Go does not verify a leaf under .internal: %v", err)
	}

	outsider := signDirectly(t, dir, inter, "x.example.org")
	out, ok := opensslVerify(t, a.Root(), inter, outsider)
	if ok || !strings.Contains(out, "permitted subtree violation") {
		t.Errorf("openssl on a leaf outside the constraints: ok %v, want a permitted subtree violation:\n%s", ok, out)
	}
	err = goVerify(a.Root(), inter, outsider, "x.example.org", time.Now())
	var invalid x509.CertificateInvalidError
	if !errors.As(err, &invalid) || invalid.Reason != x509.CANotAuthorizedForThisName {
		t.Errorf("Go on a leaf outside the constraints: %v, want CANotAuthorizedForThisName", err)
	}
	// One name outside is enough, whatever name the client asks for.
	mixed := signDirectly(t, dir, inter, "beta.internal", "x.example.org")
	if err := goVerify(a.Root(), inter, mixed, "beta.internal", time.Now()); err == nil {
		t.Error("Go verified a leaf with one name outside the constraints")
	}

	var ce *ca.ConstraintError
	if _, err := a.SignCSR(csrFor(t, p256(t), "x.example.org"), []string{"x.example.org"}, time.Now(), time.Hour); !errors.As(err, &ce) || ce.Name != "x.example.org" {
		t.Errorf("SignCSR outside the constraints: %v, want a ConstraintError naming x.example.org", err)
	}
	if _, err := a.IssueServer([]string{"localhost"}, nil, time.Hour); !errors.As(err, &ce) {
		t.Errorf("IssueServer for localhost under the mesh's constraints: %v, want a ConstraintError", err)
	}
}

// TestBusVerifiesUnderConstraints: the bus's certificate (mesh-bus and IP
// addresses, which no constraint limits) verifies under a constrained
// intermediate, with the root as a host's client holds it and with the pin
// a joining host holds.
func TestBusVerifiesUnderConstraints(t *testing.T) {
	t.Parallel()
	a, _ := newConstrained(t)
	cert, err := a.IssueServer([]string{"mesh-bus"}, []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP("::1")}, time.Hour)
	if err != nil {
		t.Fatalf("IssueServer for the bus: %v", err)
	}
	addr := serveTLS(t, cert)
	if err := dial(addr, ca.ClientTLS(a.Root(), "mesh-bus")); err != nil {
		t.Errorf("a host's client refuses the bus under a constrained intermediate: %v", err)
	}
	if err := dial(addr, ca.PinnedTLS(a.Pin(), "mesh-bus", nil)); err != nil {
		t.Errorf("a joining host refuses the bus under a constrained intermediate: %v", err)
	}
	if err := a.Reissue(append(meshDomains, "example.org"), time.Now()); err != nil {
		t.Fatal(err)
	}
	// The bus started before the reissue presents the old chain; one
	// started after, the new one: both verify.
	if err := dial(addr, ca.ClientTLS(a.Root(), "mesh-bus")); err != nil {
		t.Errorf("the bus's certificate from the replaced intermediate no longer verifies: %v", err)
	}
	cert, err = a.IssueServer([]string{"mesh-bus"}, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatalf("IssueServer for the bus after the reissue: %v", err)
	}
	if err := dial(serveTLS(t, cert), ca.ClientTLS(a.Root(), "mesh-bus")); err != nil {
		t.Errorf("the bus's certificate from the new intermediate does not verify: %v", err)
	}
}

// TestReissue: a new intermediate under the same root with the new
// constraints signs from then on; leaves the replaced one signed still
// verify with it until they expire; the replaced one is kept, its key
// removed; Load finds the new one and its key.
func TestReissue(t *testing.T) {
	t.Parallel()
	a, dir := newConstrained(t)
	now := time.Now()
	oldInter := a.Intermediate()
	old, err := a.SignCSR(csrFor(t, p256(t), "alpha.internal"), []string{"alpha.internal"}, now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rootBefore, _ := os.ReadFile(filepath.Join(dir, "root.crt"))

	domains := append(slices.Clone(meshDomains), "example.org")
	if err := a.Reissue(domains, now); err != nil {
		t.Fatalf("Reissue: %v", err)
	}
	inter := a.Intermediate()
	if inter.Equal(oldInter) || !slices.Equal(inter.PermittedDNSDomains, domains) {
		t.Fatalf("after Reissue the intermediate permits %v (same as before: %v), want %v", inter.PermittedDNSDomains, inter.Equal(oldInter), domains)
	}
	if err := inter.CheckSignatureFrom(a.Root()); err != nil {
		t.Errorf("the new intermediate is not signed by the same root: %v", err)
	}
	if rootAfter, _ := os.ReadFile(filepath.Join(dir, "root.crt")); !bytes.Equal(rootBefore, rootAfter) {
		t.Error("Reissue changed the root")
	}
	if onDisk := readCert(t, filepath.Join(dir, "intermediate.crt")); !onDisk.Equal(inter) {
		t.Error("intermediate.crt is not the new intermediate")
	}

	leaf, err := a.SignCSR(csrFor(t, p256(t), "x.example.org"), []string{"x.example.org"}, now, time.Hour)
	if err != nil {
		t.Fatalf("SignCSR under the new domain: %v", err)
	}
	if err := leaf.Cert.CheckSignatureFrom(inter); err != nil {
		t.Errorf("the new leaf is not signed by the new intermediate: %v", err)
	}
	if out, ok := opensslVerify(t, a.Root(), inter, leaf.Cert); !ok {
		t.Errorf("openssl does not verify x.example.org under the new intermediate:\n%s", out)
	}
	if err := goVerify(a.Root(), inter, leaf.Cert, "x.example.org", now); err != nil {
		t.Errorf("Go does not verify x.example.org under the new intermediate: %v", err)
	}

	kept := readCert(t, filepath.Join(dir, "intermediates", ca.SerialOf(oldInter)+".crt"))
	if !kept.Equal(oldInter) {
		t.Fatal("the replaced intermediate is not kept under intermediates/<serial>.crt")
	}
	if out, ok := opensslVerify(t, a.Root(), kept, old.Cert); !ok {
		t.Errorf("openssl does not verify the old leaf with the replaced intermediate:\n%s", out)
	}
	if err := goVerify(a.Root(), kept, old.Cert, "alpha.internal", now); err != nil {
		t.Errorf("Go does not verify the old leaf with the replaced intermediate: %v", err)
	}
	// Until it expires, and not after.
	if err := goVerify(a.Root(), kept, old.Cert, "alpha.internal", old.Cert.NotAfter.Add(time.Second)); err == nil {
		t.Error("the old leaf verifies after it expired")
	}
	if out, ok := opensslVerify(t, a.Root(), kept, old.Cert, "-attime", big.NewInt(old.Cert.NotAfter.Unix()+1).String()); ok || !strings.Contains(out, "expired") {
		t.Errorf("openssl on the old leaf after it expired: ok %v:\n%s", ok, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "intermediate.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the replaced intermediate's key is still there: %v", err)
	}
	if got := a.Intermediates(); len(got) != 2 || !got[0].Equal(inter) || !got[1].Equal(oldInter) {
		t.Errorf("Intermediates() has %d, want the new then the replaced one", len(got))
	}

	b, err := ca.Load(dir)
	if err != nil {
		t.Fatalf("Load after Reissue: %v", err)
	}
	if !b.Intermediate().Equal(inter) || len(b.Intermediates()) != 2 {
		t.Errorf("Load after Reissue: current is the new one %v, %d intermediates", b.Intermediate().Equal(inter), len(b.Intermediates()))
	}
	again, err := b.SignCSR(csrFor(t, p256(t), "y.example.org"), []string{"y.example.org"}, now, time.Hour)
	if err != nil || again.Cert.CheckSignatureFrom(inter) != nil {
		t.Errorf("the loaded authority does not sign with the new intermediate: %v", err)
	}
	// A second reissue keeps both earlier ones.
	if err := b.Reissue(meshDomains, now); err != nil {
		t.Fatal(err)
	}
	c, err := ca.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Intermediates(); len(got) != 3 {
		t.Errorf("after two reissues Load finds %d intermediates, want 3", len(got))
	}
	if _, err := os.Stat(filepath.Join(dir, "intermediates", ca.SerialOf(inter)+".key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the second replaced intermediate's key is still there: %v", err)
	}
}

// TestPreparedIsNotCurrentUntilCommitted: a prepared intermediate signs
// nothing and Load ignores it until Commit; Discard, or the next Prepare
// after a crash, removes it.
func TestPreparedIsNotCurrentUntilCommitted(t *testing.T) {
	t.Parallel()
	a, dir := newConstrained(t)
	before := a.Intermediate()
	p, err := a.Prepare(append(meshDomains, "example.org"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.Load(dir)
	if err != nil {
		t.Fatalf("Load with a prepared intermediate: %v", err)
	}
	if !b.Intermediate().Equal(before) || len(b.Intermediates()) != 1 || !a.Intermediate().Equal(before) {
		t.Error("a prepared intermediate became current before Commit")
	}
	// A crash: p is never committed nor discarded. The next Prepare removes it.
	q, err := a.Prepare(append(meshDomains, "example.net"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".pending", ".key"} {
		if _, err := os.Stat(filepath.Join(dir, "intermediates", p.Serial()+ext)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the uncommitted intermediate's %s file is still there: %v", ext, err)
		}
	}
	q.Discard()
	entries, _ := os.ReadDir(filepath.Join(dir, "intermediates"))
	if len(entries) != 0 {
		t.Errorf("after Discard the intermediates directory holds %d file(s)", len(entries))
	}
	if c, err := ca.Load(dir); err != nil || !c.Intermediate().Equal(before) {
		t.Errorf("Load after Discard: %v", err)
	}
}

// TestUnconstrainedMeshKeepsWorking: a mesh created before constraints
// (an unconstrained intermediate) loads and signs as before, and Reissue
// gives it a constrained one.
func TestUnconstrainedMeshKeepsWorking(t *testing.T) {
	t.Parallel()
	a, dir := newAuthority(t, "old")
	if a.Permitted() != nil {
		t.Fatalf("an intermediate created without domains permits %v", a.Permitted())
	}
	cert, err := a.IssueServer([]string{"mesh-bus", "localhost"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	verifyChain(t, cert, a.Root(), "localhost")
	if err := a.Reissue(meshDomains, time.Now()); err != nil {
		t.Fatal(err)
	}
	b, err := ca.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Permitted(), meshDomains) {
		t.Errorf("after Reissue the loaded intermediate permits %v", b.Permitted())
	}
	// The bus's old certificate still verifies.
	verifyChain(t, cert, a.Root(), "mesh-bus")
}

// TestParseCSRRefusals: a CSR is refused when it does not parse, when its
// signature does not verify, and when its key is weaker than the minimum;
// ECDSA P-256 and P-384 and RSA 2048 are taken.
func TestParseCSRRefusals(t *testing.T) {
	t.Parallel()
	der := func(key crypto.Signer) []byte {
		b, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: []string{"alpha.internal"}}, key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	rsaKey := func(bits int) crypto.Signer {
		k, err := rsa.GenerateKey(rand.Reader, bits)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	tampered := der(p256(t))
	tampered[len(tampered)-5] ^= 0xff // inside the signature

	for _, tc := range []struct {
		name string
		der  []byte
		want string // "" when taken
		weak bool
	}{
		{"P-256", der(p256(t)), "", false},
		{"P-384", der(p384), "", false},
		{"RSA 2048", der(rsaKey(2048)), "", false},
		{"RSA 1024", der(rsaKey(1024)), "RSA key has 1024 bits", true},
		{"P-224", der(p224), "curve P-224", true},
		{"Ed25519", der(ed), "ed25519", true},
		{"garbage", []byte("not a CSR at all"), "does not parse", false},
		{"bad signature", tampered, "signature does not verify", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ca.ParseCSR(tc.der)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			var ke *ca.KeyError
			if errors.As(err, &ke) != tc.weak {
				t.Errorf("KeyError %v, want %v", errors.As(err, &ke), tc.weak)
			}
		})
	}
}

// TestSignedLeaf: a leaf is for exactly the names given, for serverAuth
// only, valid for the lifetime asked from the time given; its chain is the
// leaf and the current intermediate.
func TestSignedLeaf(t *testing.T) {
	t.Parallel()
	a, _ := newConstrained(t)
	at := time.Now().Add(-48 * time.Hour)
	names := []string{"web.alpha.internal", "alpha.internal"}
	key := p256(t)
	leaf, err := a.SignCSR(csrFor(t, key, names...), names, at, 30*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := leaf.Cert
	if !slices.Equal(c.DNSNames, names) || len(c.IPAddresses) != 0 || len(c.URIs) != 0 || len(c.EmailAddresses) != 0 {
		t.Errorf("leaf names %v %v %v %v, want exactly %v", c.DNSNames, c.IPAddresses, c.URIs, c.EmailAddresses, names)
	}
	if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || c.IsCA {
		t.Errorf("leaf usages %v, IsCA %v; want serverAuth only", c.ExtKeyUsage, c.IsCA)
	}
	if !c.NotAfter.Equal(at.Add(30 * 24 * time.Hour).Truncate(time.Second)) {
		t.Errorf("leaf NotAfter %v, want %v", c.NotAfter, at.Add(30*24*time.Hour))
	}
	var chain []*x509.Certificate
	for rest := leaf.Chain; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, cert)
	}
	if len(chain) != 2 || !chain[0].Equal(c) || !chain[1].Equal(a.Intermediate()) {
		t.Errorf("chain holds %d certificates, want the leaf then the intermediate", len(chain))
	}
	// A TLS server takes the chain with the CSR's key.
	der, _ := x509.MarshalECPrivateKey(key)
	if _, err := tls.X509KeyPair(leaf.Chain, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})); err != nil {
		t.Errorf("the chain does not pair with the CSR's key: %v", err)
	}
}
