package ca_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
)

// TestParseChain: the chain a declaration carries is taken only when every
// certificate in it is an intermediate of the pinned root, valid now; each
// other chain is refused, naming what is wrong.
func TestParseChain(t *testing.T) {
	t.Parallel()
	a, dir := newConstrained(t)
	first := a.Intermediate()
	if err := a.Reissue(append(meshDomains, "example.org"), time.Now()); err != nil {
		t.Fatal(err)
	}
	current := a.Intermediate()
	other, _ := newConstrained(t)
	leaf := signDirectly(t, dir, current, "alpha.internal")
	pemOf := ca.ChainPEM
	many := make([]*x509.Certificate, ca.MaxChain+1)
	for i := range many {
		many[i] = current
	}
	now := time.Now()
	for _, tc := range []struct {
		name  string
		chain []byte
		at    time.Time
		want  string // "" takes it
		n     int
	}{
		{"the current intermediate", pemOf(current), now, "", 1},
		{"the current then the one it replaced", pemOf(current, first), now, "", 2},
		{"with spaces around", append(append([]byte("\n"), pemOf(current)...), "\n\n"...), now, "", 1},
		{"another mesh's intermediate", pemOf(other.Intermediate()), now, "does not verify against the pinned root", 0},
		{"ours then a stranger", pemOf(current, other.Intermediate()), now, "does not verify against the pinned root", 0},
		{"the root itself", pemOf(a.Root()), now, "is the root itself", 0},
		{"a leaf", pemOf(leaf), now, "is not a CA", 0},
		{"expired", pemOf(current), now.Add(ca.IntermediateLifetime + time.Hour), "does not verify", 0},
		{"nothing", nil, now, "holds no certificate", 0},
		{"not PEM", []byte("MIIB..."), now, "not PEM", 0},
		{"data after", append(pemOf(current), "junk"...), now, "data after its last certificate", 0},
		{"a key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}}), now, `"EC PRIVATE KEY" PEM block`, 0},
		{"a broken certificate", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2}}), now, "does not parse", 0},
		{"too many", pemOf(many...), now, "more than 8 certificates", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ca.ParseChain(tc.chain, a.Root(), tc.at)
			if tc.want == "" {
				if err != nil || len(got) != tc.n || !got[0].Equal(current) {
					t.Fatalf("ParseChain = %d certificates, %v; want %d, the current first", len(got), err, tc.n)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseChain = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := ca.ParseChain(pemOf(current), nil, now); err == nil {
		t.Error("ParseChain without a root took the chain")
	}
}

// TestHeldTLS: a bus that presents its leaf without the intermediate is
// refused by a client holding only the root, and verified by one that also
// holds the intermediate (the chain a host keeps); held intermediates never
// stand in for the root, nor for the server's name.
func TestHeldTLS(t *testing.T) {
	t.Parallel()
	a, _ := newConstrained(t)
	other, _ := newConstrained(t)
	cert, err := a.IssueServer([]string{"mesh-bus"}, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	whole := serveTLS(t, cert)
	bare := cert
	bare.Certificate = cert.Certificate[:1] // the leaf alone
	leafOnly := serveTLS(t, bare)
	ocert, err := other.IssueServer([]string{"mesh-bus"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign := serveTLS(t, ocert)
	held := func(c ...*x509.Certificate) func() []*x509.Certificate {
		return func() []*x509.Certificate { return c }
	}
	for _, tc := range []struct {
		name string
		addr string
		cfg  *tls.Config
		ok   bool
	}{
		{"whole chain, nothing held", whole, ca.HeldTLS(a.Root(), "mesh-bus", nil), true},
		{"leaf alone, only the root", leafOnly, ca.ClientTLS(a.Root(), "mesh-bus"), false},
		{"leaf alone, nothing held", leafOnly, ca.HeldTLS(a.Root(), "mesh-bus", held()), false},
		{"leaf alone, the intermediate held", leafOnly, ca.HeldTLS(a.Root(), "mesh-bus", held(a.Intermediate())), true},
		{"leaf alone, another name", leafOnly, ca.HeldTLS(a.Root(), "other", held(a.Intermediate())), false},
		{"another mesh's bus, its intermediate held", foreign, ca.HeldTLS(a.Root(), "mesh-bus", held(other.Intermediate())), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := dial(tc.addr, tc.cfg)
			if (err == nil) != tc.ok {
				t.Fatalf("handshake: %v, want success %v", err, tc.ok)
			}
		})
	}
}

// TestIssuerChecksWithTheHeldChain: an answer that carries the leaf alone
// verifies only through the chain the host holds.
func TestIssuerChecksWithTheHeldChain(t *testing.T) {
	t.Parallel()
	a, _ := newConstrained(t)
	leafAlone := func(_ context.Context, der []byte) ([]byte, error) {
		csr, err := ca.ParseCSR(der)
		if err != nil {
			return nil, err
		}
		leaf, err := a.SignCSR(csr, csr.DNSNames, time.Now(), time.Hour)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Cert.Raw}), err
	}
	for _, tc := range []struct {
		name string
		held func() []*x509.Certificate
		ok   bool
	}{
		{"nothing held", nil, false},
		{"the intermediate held", func() []*x509.Certificate { return []*x509.Certificate{a.Intermediate()} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iss := &ca.Issuer{Mesh: "prod", Root: a.Root(), Sign: leafAlone, Held: tc.held}
			_, err := iss.Issue(context.Background(), csrFor(t, p256(t), "web.alpha.internal"))
			if (err == nil) != tc.ok {
				t.Fatalf("Issue: %v, want success %v", err, tc.ok)
			}
		})
	}
	if !bytes.Equal(ca.ChainPEM(a.Intermediate()), a.IntermediatePEM()) {
		t.Error("ChainPEM of the intermediate is not its PEM")
	}
}

// BenchmarkParseChain is what a host spends checking the chain one
// declaration carries against its pinned root.
func BenchmarkParseChain(b *testing.B) {
	a, err := ca.Create(b.TempDir(), "prod", time.Now(), meshDomains...)
	if err != nil {
		b.Fatal(err)
	}
	chain, root, now := a.IntermediatePEM(), a.Root(), time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ca.ParseChain(chain, root, now); err != nil {
			b.Fatal(err)
		}
	}
}
