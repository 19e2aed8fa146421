// Package ca is the mesh's internal certificate authority: a root whose key
// signs only the intermediate, and an intermediate that signs leaves.
package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Lifetimes of what the authority makes.
const (
	RootLifetime         = 20 * 365 * 24 * time.Hour
	IntermediateLifetime = 5 * 365 * 24 * time.Hour
)

// Files under the authority's directory.
const (
	rootCertFile  = "root.crt"
	rootKeyFile   = "root.key"
	interCertFile = "intermediate.crt"
	interKeyFile  = "intermediate.key"
)

// Authority issues the mesh's certificates.
type Authority struct {
	root     *x509.Certificate
	inter    *x509.Certificate
	interKey crypto.Signer
	rootsPEM []byte
	interPEM []byte
	issueNow func() time.Time
}

// Create makes a new root and intermediate for mesh and writes them under dir
// (created 0700; keys 0600). A dir that already holds a root is refused.
func Create(dir, mesh string, now time.Time) (*Authority, error) {
	if _, err := os.Stat(filepath.Join(dir, rootCertFile)); err == nil {
		return nil, fmt.Errorf("create CA in %s: a root already exists there", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("create CA in %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create CA directory: %w", err)
	}
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate root key: %w", err)
	}
	rootTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: mesh + " mesh root", Organization: []string{"mesh " + mesh}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(RootLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, fmt.Errorf("sign root: %w", err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	interKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate intermediate key: %w", err)
	}
	interTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: mesh + " mesh intermediate", Organization: []string{"mesh " + mesh}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(IntermediateLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	interDER, err := x509.CreateCertificate(rand.Reader, interTmpl, root, &interKey.PublicKey, rootKey)
	if err != nil {
		return nil, fmt.Errorf("sign intermediate: %w", err)
	}
	files := []struct {
		name string
		pem  []byte
		mode os.FileMode
	}{
		{rootCertFile, certPEM(rootDER), 0o644},
		{rootKeyFile, keyPEM(rootKey), 0o600},
		{interCertFile, certPEM(interDER), 0o644},
		{interKeyFile, keyPEM(interKey), 0o600},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.pem, f.mode); err != nil {
			return nil, fmt.Errorf("write CA file %s: %w", f.name, err)
		}
	}
	return Load(dir)
}

// Load reads the authority kept under dir. The root's key is not read: it
// signs only the intermediate, once, at Create.
func Load(dir string) (*Authority, error) {
	read := func(name string) ([]byte, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		return b, nil
	}
	rootPEM, err := read(rootCertFile)
	if err != nil {
		return nil, err
	}
	interPEM, err := read(interCertFile)
	if err != nil {
		return nil, err
	}
	interKeyPEM, err := read(interKeyFile)
	if err != nil {
		return nil, err
	}
	root, err := ParseCert(rootPEM)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", rootCertFile, err)
	}
	inter, err := ParseCert(interPEM)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", interCertFile, err)
	}
	block, _ := pem.Decode(interKeyPEM)
	if block == nil {
		return nil, fmt.Errorf("parse %s: no PEM block", interKeyFile)
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", interKeyFile, err)
	}
	if err := inter.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("intermediate is not signed by the root: %w", err)
	}
	if pub, ok := inter.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("%s does not belong to %s: the CA directory %s mixes two authorities", interKeyFile, interCertFile, dir)
	}
	return &Authority{root: root, inter: inter, interKey: key, rootsPEM: rootPEM, interPEM: interPEM, issueNow: time.Now}, nil
}

// RootsPEM is the root certificate, PEM-encoded: what /roots.pem serves.
func (a *Authority) RootsPEM() []byte { return append([]byte(nil), a.rootsPEM...) }

// Root is the root certificate.
func (a *Authority) Root() *x509.Certificate { return a.root }

// Pin is the pin of the root: what a token carries and a joining host checks.
func (a *Authority) Pin() string { return Pin(a.root) }

// Pin is "sha256:" and the hex SHA-256 of cert's DER bytes.
func Pin(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// IssueServer signs a leaf for a TLS server reachable at names and ips. The
// chain it returns is leaf, intermediate and root, so that a client holding
// only the root's pin can find the root in it and check it.
func (a *Authority) IssueServer(names []string, ips []net.IP, lifetime time.Duration) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate leaf key: %w", err)
	}
	now := a.issueNow()
	cn := "mesh"
	if len(names) > 0 {
		cn = names[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     names,
		IPAddresses:  ips,
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.inter, &key.PublicKey, a.interKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("sign leaf for %v: %w", names, err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{
		Certificate: [][]byte{der, a.inter.Raw, a.root.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}

// ParseCert decodes the first PEM certificate in b.
func ParseCert(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func keyPEM(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err) // a P-256 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// RootPEM is cert, PEM-encoded.
func RootPEM(cert *x509.Certificate) []byte { return certPEM(cert.Raw) }
