package ca_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
)

func newAuthority(t *testing.T, mesh string) (*ca.Authority, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	a, err := ca.Create(dir, mesh, time.Now())
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return a, dir
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ca.ParseCert(b)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return c
}

func TestCreateFiles(t *testing.T) {
	_, dir := newAuthority(t, "prod")
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{
		{"root.crt", 0o644},
		{"root.key", 0o600},
		{"intermediate.crt", 0o644},
		{"intermediate.key", 0o600},
	} {
		fi, err := os.Stat(filepath.Join(dir, f.name))
		if err != nil {
			t.Errorf("Create wrote no %s: %v", f.name, err)
			continue
		}
		if got := fi.Mode().Perm(); got != f.mode {
			t.Errorf("%s has mode %v, want %v", f.name, got, f.mode)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("CA directory: %v, %v; want mode 0700", fi.Mode().Perm(), err)
	}

	before, err := os.ReadFile(filepath.Join(dir, "root.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Create(dir, "prod", time.Now()); err == nil {
		t.Fatal("a second Create in the same directory succeeded")
	} else if !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second Create error %q does not say a root exists", err)
	}
	after, err := os.ReadFile(filepath.Join(dir, "root.key"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("a refused Create replaced the root key")
	}
}

func TestCreateHierarchy(t *testing.T) {
	a, dir := newAuthority(t, "prod")
	root := readCert(t, filepath.Join(dir, "root.crt"))
	inter := readCert(t, filepath.Join(dir, "intermediate.crt"))

	if !root.IsCA || !root.BasicConstraintsValid {
		t.Errorf("root: IsCA %v, BasicConstraintsValid %v", root.IsCA, root.BasicConstraintsValid)
	}
	if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign; root.KeyUsage != want {
		t.Errorf("root KeyUsage = %b, want only CertSign|CRLSign (%b)", root.KeyUsage, want)
	}
	if err := root.CheckSignatureFrom(root); err != nil {
		t.Errorf("root is not self-signed: %v", err)
	}
	if !inter.IsCA || !inter.BasicConstraintsValid {
		t.Errorf("intermediate: IsCA %v, BasicConstraintsValid %v", inter.IsCA, inter.BasicConstraintsValid)
	}
	if inter.MaxPathLen != 0 || !inter.MaxPathLenZero {
		t.Errorf("intermediate MaxPathLen %d, MaxPathLenZero %v; want 0, true (signs leaves only)", inter.MaxPathLen, inter.MaxPathLenZero)
	}
	if err := inter.CheckSignatureFrom(root); err != nil {
		t.Errorf("intermediate is not signed by the root: %v", err)
	}
	if !bytes.Equal(a.Root().Raw, root.Raw) {
		t.Error("Authority.Root is not the root written to root.crt")
	}
	if !strings.Contains(root.Subject.CommonName, "prod") {
		t.Errorf("root subject %q does not name the mesh", root.Subject.CommonName)
	}
	if a.Pin() != ca.Pin(root) || !strings.HasPrefix(a.Pin(), "sha256:") || len(a.Pin()) != len("sha256:")+64 {
		t.Errorf("Pin = %q", a.Pin())
	}
	if got, err := ca.ParseCert(a.RootsPEM()); err != nil || !bytes.Equal(got.Raw, root.Raw) {
		t.Errorf("RootsPEM does not hold the root: %v", err)
	}
}

func TestLoadRoundTrip(t *testing.T) {
	a, dir := newAuthority(t, "prod")
	b, err := ca.Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if a.Pin() != b.Pin() {
		t.Errorf("Load gave pin %s, Create %s", b.Pin(), a.Pin())
	}
	// The loaded authority issues leaves that the created one's root verifies.
	cert, err := b.IssueServer([]string{"mesh-bus"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	verifyChain(t, cert, a.Root(), "mesh-bus")
}

func TestLoadRefusesForeignIntermediate(t *testing.T) {
	_, dir := newAuthority(t, "prod")
	_, otherDir := newAuthority(t, "other")
	for _, name := range []string{"intermediate.crt", "intermediate.key"} {
		b, err := os.ReadFile(filepath.Join(otherDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := ca.Load(dir)
	if err == nil {
		t.Fatal("Load accepted an intermediate from another authority")
	}
	if !strings.Contains(err.Error(), "not signed by the root") {
		t.Errorf("Load error %q does not say the intermediate is not signed by the root", err)
	}
}

func verifyChain(t *testing.T, cert tls.Certificate, root *x509.Certificate, name string) {
	t.Helper()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter}); err != nil {
		t.Errorf("leaf does not verify against the root: %v", err)
	}
}

func writePEM(t *testing.T, path string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestIssueServer(t *testing.T) {
	a, dir := newAuthority(t, "prod")
	ip := net.IPv4(127, 0, 0, 1)
	cert, err := a.IssueServer([]string{"mesh-bus"}, []net.IP{ip}, time.Hour)
	if err != nil {
		t.Fatalf("IssueServer: %v", err)
	}
	if len(cert.Certificate) != 3 {
		t.Fatalf("chain has %d certificates, want leaf, intermediate, root", len(cert.Certificate))
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	inter := readCert(t, filepath.Join(dir, "intermediate.crt"))
	if !bytes.Equal(cert.Certificate[1], inter.Raw) {
		t.Error("chain[1] is not the intermediate")
	}
	if !bytes.Equal(cert.Certificate[2], a.Root().Raw) {
		t.Error("chain[2] is not the root")
	}
	if leaf.IsCA {
		t.Error("the leaf is a CA")
	}
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "mesh-bus" || len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(ip) {
		t.Errorf("leaf names %v, IPs %v", leaf.DNSNames, leaf.IPAddresses)
	}
	if err := leaf.CheckSignatureFrom(inter); err != nil {
		t.Errorf("leaf is not signed by the intermediate: %v", err)
	}
	if d := leaf.NotAfter.Sub(leaf.NotBefore); d < time.Hour || d > time.Hour+10*time.Minute {
		t.Errorf("leaf is valid for %v, want about the hour asked", d)
	}

	tmp := t.TempDir()
	leafPath, interPath, rootPath := filepath.Join(tmp, "leaf.pem"), filepath.Join(tmp, "inter.pem"), filepath.Join(tmp, "root.pem")
	writePEM(t, leafPath, cert.Certificate[0])
	writePEM(t, interPath, cert.Certificate[1])
	writePEM(t, rootPath, cert.Certificate[2])

	out, err := exec.Command("openssl", "verify", "-CAfile", rootPath, "-untrusted", interPath, leafPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), ": OK") {
		t.Errorf("openssl verify against the root: %v\n%s", err, out)
	}
	// The intermediate alone is not a trust anchor: only the root is.
	out, err = exec.Command("openssl", "verify", "-CAfile", interPath, leafPath).CombinedOutput()
	if err == nil || strings.Contains(string(out), ": OK") {
		t.Errorf("openssl verify with the intermediate as the only anchor succeeded:\n%s", out)
	}
	// A root from another authority does not verify the chain.
	other, _ := newAuthority(t, "other")
	otherPath := filepath.Join(tmp, "other.pem")
	writePEM(t, otherPath, other.Root().Raw)
	out, err = exec.Command("openssl", "verify", "-CAfile", otherPath, "-untrusted", interPath, leafPath).CombinedOutput()
	if err == nil || strings.Contains(string(out), ": OK") {
		t.Errorf("openssl verify against another authority's root succeeded:\n%s", out)
	}
}

// serveTLS runs a TLS server on loopback with cert that completes handshakes
// and closes; it returns the address.
func serveTLS(t *testing.T, cert tls.Certificate) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if tc, ok := c.(*tls.Conn); ok {
					tc.Handshake()
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(addr string, cfg *tls.Config) error {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	return c.Close()
}

func TestPinnedTLS(t *testing.T) {
	a, _ := newAuthority(t, "prod")
	other, _ := newAuthority(t, "other")
	cert, err := a.IssueServer([]string{"mesh-bus"}, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cert)

	t.Run("right pin", func(t *testing.T) {
		var found *x509.Certificate
		if err := dial(addr, ca.PinnedTLS(a.Pin(), "mesh-bus", func(c *x509.Certificate) { found = c })); err != nil {
			t.Fatalf("handshake with the right pin: %v", err)
		}
		if found == nil {
			t.Fatal("found was not called")
		}
		if ca.Pin(found) != a.Pin() || !bytes.Equal(found.Raw, a.Root().Raw) {
			t.Errorf("found a root with pin %s, want %s", ca.Pin(found), a.Pin())
		}
	})
	t.Run("another authority's pin", func(t *testing.T) {
		called := false
		err := dial(addr, ca.PinnedTLS(other.Pin(), "mesh-bus", func(*x509.Certificate) { called = true }))
		if err == nil {
			t.Fatal("handshake with another authority's pin succeeded")
		}
		if !strings.Contains(err.Error(), "no root with pin") {
			t.Errorf("error %q does not say no root has the pin", err)
		}
		if called {
			t.Error("found was called for a refused server")
		}
	})
	t.Run("wrong server name", func(t *testing.T) {
		called := false
		err := dial(addr, ca.PinnedTLS(a.Pin(), "other", func(*x509.Certificate) { called = true }))
		if err == nil {
			t.Fatal("handshake with the wrong server name succeeded")
		}
		if !strings.Contains(err.Error(), "other") {
			t.Errorf("error %q does not name the server name asked", err)
		}
		if called {
			t.Error("found was called for a refused server")
		}
	})
	t.Run("foreign chain carrying the pinned root", func(t *testing.T) {
		// The root is public: a server of another authority can present it.
		// Holding a certificate with the pin is not enough; it must verify the chain.
		oc, err := other.IssueServer([]string{"mesh-bus"}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		oc.Certificate = append(oc.Certificate, a.Root().Raw)
		oaddr := serveTLS(t, oc)
		called := false
		err = dial(oaddr, ca.PinnedTLS(a.Pin(), "mesh-bus", func(*x509.Certificate) { called = true }))
		if err == nil {
			t.Fatal("handshake with a foreign chain carrying the pinned root succeeded")
		}
		if !strings.Contains(err.Error(), "pinned root") {
			t.Errorf("error %q does not say the chain fails against the pinned root", err)
		}
		if called {
			t.Error("found was called for a refused server")
		}
	})
	t.Run("server of another authority", func(t *testing.T) {
		// Another mesh's server, which does hold a root: not the pinned one.
		oc, err := other.IssueServer([]string{"mesh-bus"}, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		oaddr := serveTLS(t, oc)
		if err := dial(oaddr, ca.PinnedTLS(a.Pin(), "mesh-bus", nil)); err == nil || !strings.Contains(err.Error(), "no root with pin") {
			t.Errorf("handshake with another mesh's server = %v, want a refusal naming the pin", err)
		}
	})
}

func TestClientTLS(t *testing.T) {
	a, _ := newAuthority(t, "prod")
	other, _ := newAuthority(t, "other")
	cert, err := a.IssueServer([]string{"mesh-bus"}, []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, cert)

	if err := dial(addr, ca.ClientTLS(a.Root(), "mesh-bus")); err != nil {
		t.Errorf("handshake trusting the root: %v", err)
	}
	err = dial(addr, ca.ClientTLS(other.Root(), "mesh-bus"))
	var unknown x509.UnknownAuthorityError
	if err == nil {
		t.Error("handshake trusting another authority's root succeeded")
	} else if !errors.As(err, &unknown) && !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("handshake trusting another root = %v, want an unknown authority", err)
	}
	if err := dial(addr, ca.ClientTLS(a.Root(), "other")); err == nil {
		t.Error("handshake with the wrong server name succeeded")
	}
}

// TestLoadRefusesForeignIntermediateKey: a key that does not belong to the
// intermediate is refused at load, not at the first certificate issued.
func TestLoadRefusesForeignIntermediateKey(t *testing.T) {
	_, dir := newAuthority(t, "prod")
	_, otherDir := newAuthority(t, "other")
	b, err := os.ReadFile(filepath.Join(otherDir, "intermediate.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "intermediate.key"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ca.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "does not belong to") {
		t.Fatalf("Load of a mismatched intermediate key: %v", err)
	}
}
