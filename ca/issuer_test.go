package ca_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mesh-fleet/mesh/ca"
	"go.uber.org/zap"
)

// magicWith is a certmagic config over a storage directory of its own whose
// only issuer is iss.
func magicWith(t *testing.T, iss certmagic.Issuer) *certmagic.Config {
	t.Helper()
	var cfg *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return cfg, nil },
		Logger:           zap.NewNop(),
	})
	t.Cleanup(cache.Stop)
	cfg = certmagic.New(cache, certmagic.Config{
		Storage: &certmagic.FileStorage{Path: t.TempDir()},
		Issuers: []certmagic.Issuer{iss},
		Logger:  zap.NewNop(),
		OCSP:    certmagic.OCSPConfig{DisableStapling: true},
	})
	return cfg
}

// The issuer obtains through real certmagic: the key stays in certmagic's
// storage, the chain the authority signed verifies against the root and
// names what was asked for.
func TestIssuerObtainsThroughCertmagic(t *testing.T) {
	t.Parallel()
	a, _ := newConstrained(t)
	iss := &ca.Issuer{Mesh: "prod", Root: a.Root(), Sign: func(_ context.Context, der []byte) ([]byte, error) {
		csr, err := ca.ParseCSR(der)
		if err != nil {
			return nil, err
		}
		leaf, err := a.SignCSR(csr, csr.DNSNames, time.Now(), time.Hour)
		return leaf.Chain, err
	}}
	cfg := magicWith(t, iss)
	const name = "web.alpha.internal"
	if err := cfg.ObtainCertSync(context.Background(), name); err != nil {
		t.Fatalf("ObtainCertSync: %v", err)
	}
	ctx := context.Background()
	chain, err := cfg.Storage.Load(ctx, certmagic.StorageKeys.SiteCert(iss.IssuerKey(), name))
	if err != nil {
		t.Fatalf("the certificate is not in certmagic's storage: %v", err)
	}
	key, err := cfg.Storage.Load(ctx, certmagic.StorageKeys.SitePrivateKey(iss.IssuerKey(), name))
	if err != nil {
		t.Fatalf("the key is not in certmagic's storage: %v", err)
	}
	leaf, err := ca.ParseCert(chain)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.DNSNames[0] != name || len(leaf.DNSNames) != 1 {
		t.Fatalf("leaf names %v, want [%s]", leaf.DNSNames, name)
	}
	if !strings.Contains(string(key), "PRIVATE KEY") {
		t.Fatalf("no key beside the certificate in storage")
	}
	if _, ok := opensslVerify(t, a.Root(), a.Intermediate(), leaf); !ok {
		t.Fatalf("openssl does not verify the leaf certmagic obtained")
	}
}

// A chain the controller should not have returned is refused before
// certmagic keeps it: another key's leaf, other names, a leaf of another
// mesh, no certificate at all.
func TestIssuerRefusesWhatWasNotAskedFor(t *testing.T) {
	t.Parallel()
	a, _ := newConstrained(t)
	other, err := ca.Create(t.TempDir(), "other", time.Now(), meshDomains...)
	if err != nil {
		t.Fatal(err)
	}
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	signWith := func(auth *ca.Authority, mutate func(*x509.CertificateRequest) *x509.CertificateRequest) func(context.Context, []byte) ([]byte, error) {
		return func(_ context.Context, der []byte) ([]byte, error) {
			csr, err := ca.ParseCSR(der)
			if err != nil {
				return nil, err
			}
			csr = mutate(csr)
			leaf, err := auth.SignCSR(csr, csr.DNSNames, time.Now(), time.Hour)
			return leaf.Chain, err
		}
	}
	same := func(c *x509.CertificateRequest) *x509.CertificateRequest { return c }
	for _, tc := range []struct {
		name string
		sign func(context.Context, []byte) ([]byte, error)
		want string
	}{
		{"another key", signWith(a, func(c *x509.CertificateRequest) *x509.CertificateRequest {
			return csrFor(t, otherKey, c.DNSNames...)
		}), "another key"},
		{"other names", signWith(a, func(c *x509.CertificateRequest) *x509.CertificateRequest {
			d := *c
			d.DNSNames = append(c.DNSNames, "extra.alpha.internal")
			return &d
		}), "not the"},
		{"another mesh", signWith(other, same), "does not verify"},
		{"nothing", func(context.Context, []byte) ([]byte, error) { return []byte("not pem"), nil }, "no certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			iss := &ca.Issuer{Mesh: "prod", Root: a.Root(), Sign: tc.sign}
			key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			_, err := iss.Issue(context.Background(), csrFor(t, key, "web.alpha.internal"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Issue: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestLeafBackdateIsProportional: a leaf is valid from five minutes before
// it was signed, or a tenth of its lifetime when that is shorter, so a
// renewal at a third of the validity left (certmagic's window, ratio 1/3)
// falls near two thirds of the lifetime: a one-minute leaf is not in its
// renewal window when it is signed (a fixed five minutes would put it there
// at once, and it would be renewed at every check), and it is once two
// thirds of its minute have passed.
func TestLeafBackdateIsProportional(t *testing.T) {
	t.Parallel()
	a, _ := newConstrained(t)
	now := time.Now().Truncate(time.Second)
	inWindow := func(leaf *x509.Certificate, at time.Time) bool {
		window := leaf.NotAfter.Sub(leaf.NotBefore) / 3
		return !at.Before(leaf.NotAfter.Add(-window))
	}
	for _, tc := range []struct {
		lifetime, backdate time.Duration
	}{
		{time.Minute, 6 * time.Second},
		{10 * time.Minute, time.Minute},
		{time.Hour, 5 * time.Minute},
		{30 * 24 * time.Hour, 5 * time.Minute},
	} {
		leaf, err := a.SignCSR(csrFor(t, p256(t), "web.alpha.internal"), []string{"web.alpha.internal"}, now, tc.lifetime)
		if err != nil {
			t.Fatal(err)
		}
		if got := now.Sub(leaf.Cert.NotBefore); got != tc.backdate {
			t.Errorf("lifetime %s: valid from %s before signing, want %s", tc.lifetime, got, tc.backdate)
		}
		if inWindow(leaf.Cert, now) {
			t.Errorf("lifetime %s: in its renewal window as it is signed", tc.lifetime)
		}
		if !inWindow(leaf.Cert, now.Add(tc.lifetime*2/3)) {
			t.Errorf("lifetime %s: not in its renewal window at two thirds of its lifetime", tc.lifetime)
		}
	}
}
