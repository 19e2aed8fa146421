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
	"sort"
	"strings"
	"sync"
	"time"
)

// Lifetimes of what the authority makes.
const (
	RootLifetime         = 20 * 365 * 24 * time.Hour
	IntermediateLifetime = 5 * 365 * 24 * time.Hour
)

// Files under the authority's directory. intermediate.crt is the current
// intermediate, the one that signs; its key is intermediates/<serial>.key,
// or intermediate.key for the one Create made. An intermediate replaced by
// Reissue is kept as intermediates/<serial>.crt, so the leaves it signed
// still verify until they expire; its key is removed.
const (
	rootCertFile  = "root.crt"
	rootKeyFile   = "root.key"
	interCertFile = "intermediate.crt"
	interKeyFile  = "intermediate.key"
	keptDir       = "intermediates"
)

// Authority issues the mesh's certificates. It is safe for concurrent use:
// Reissue replaces the intermediate under its lock.
type Authority struct {
	dir      string
	root     *x509.Certificate
	rootsPEM []byte
	issueNow func() time.Time

	mu       sync.RWMutex
	inter    *x509.Certificate
	interKey crypto.Signer
	interPEM []byte
	// keyPath is the file of interKey, removed when it is replaced.
	keyPath string
	// kept are the intermediates Reissue replaced, oldest first.
	kept []*x509.Certificate
}

// Create makes a new root and intermediate for mesh and writes them under dir
// (created 0700; keys 0600). A dir that already holds a root is refused.
// The intermediate is constrained to the DNS names under permitted (each
// domain and every name below it; IP addresses are not constrained); none
// given: unconstrained.
func Create(dir, mesh string, now time.Time, permitted ...string) (*Authority, error) {
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
	interDER, err := signIntermediate(root, rootKey, &interKey.PublicKey, permitted, now)
	if err != nil {
		return nil, err
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

// signIntermediate signs an intermediate for pub under root, constrained to
// permitted (none: unconstrained).
func signIntermediate(root *x509.Certificate, rootKey crypto.Signer, pub crypto.PublicKey, permitted []string, now time.Time) ([]byte, error) {
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: meshOf(root) + " mesh intermediate", Organization: root.Subject.Organization},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(IntermediateLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	if len(permitted) > 0 {
		tmpl.PermittedDNSDomains = append([]string(nil), permitted...)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root, pub, rootKey)
	if err != nil {
		return nil, fmt.Errorf("sign intermediate: %w", err)
	}
	return der, nil
}

// meshOf is the mesh's name as its root's subject carries it.
func meshOf(root *x509.Certificate) string {
	name, _ := strings.CutSuffix(root.Subject.CommonName, " mesh root")
	return name
}

// Load reads the authority kept under dir. The root's key is not read: it
// signs only intermediates, at Create and at Reissue.
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
	root, err := ParseCert(rootPEM)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", rootCertFile, err)
	}
	inter, err := ParseCert(interPEM)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", interCertFile, err)
	}
	if err := inter.CheckSignatureFrom(root); err != nil {
		return nil, fmt.Errorf("intermediate is not signed by the root: %w", err)
	}
	// The current intermediate's key: by its serial once Reissue made it,
	// else the one Create wrote.
	keyPath := filepath.Join(dir, keptDir, SerialOf(inter)+".key")
	if _, err := os.Stat(keyPath); errors.Is(err, os.ErrNotExist) {
		keyPath = filepath.Join(dir, interKeyFile)
	}
	key, err := readECKey(keyPath)
	if err != nil {
		return nil, err
	}
	if pub, ok := inter.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("%s does not belong to %s: the CA directory %s mixes two authorities", filepath.Base(keyPath), interCertFile, dir)
	}
	kept, err := readKept(dir, root, inter)
	if err != nil {
		return nil, err
	}
	return &Authority{dir: dir, root: root, inter: inter, interKey: key, keyPath: keyPath, kept: kept,
		rootsPEM: rootPEM, interPEM: interPEM, issueNow: time.Now}, nil
}

// readECKey reads a PEM EC private key.
func readECKey(path string) (*ecdsa.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("parse %s: no PEM block", filepath.Base(path))
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Base(path), err)
	}
	return key, nil
}

// readKept reads the intermediates Reissue replaced, oldest first: each
// signed by root, the current one left out.
func readKept(dir string, root, current *x509.Certificate) ([]*x509.Certificate, error) {
	entries, err := os.ReadDir(filepath.Join(dir, keptDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read kept intermediates: %w", err)
	}
	var kept []*x509.Certificate
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".crt") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, keptDir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read kept intermediate: %w", err)
		}
		c, err := ParseCert(b)
		if err != nil {
			return nil, fmt.Errorf("parse kept intermediate %s: %w", e.Name(), err)
		}
		if c.CheckSignatureFrom(root) != nil {
			return nil, fmt.Errorf("kept intermediate %s is not signed by the root: the CA directory %s mixes two authorities", e.Name(), dir)
		}
		if c.Equal(current) {
			continue // prepared, then made current
		}
		kept = append(kept, c)
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].NotBefore.Before(kept[j].NotBefore) })
	return kept, nil
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
// only the root's pin can find the root in it and check it. A name the
// intermediate's constraints do not permit is refused: its leaf would not
// verify.
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
	a.mu.RLock()
	defer a.mu.RUnlock()
	if err := permits(a.inter, names); err != nil {
		return tls.Certificate{}, err
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
