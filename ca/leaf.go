package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MinRSABits is the smallest RSA key a leaf may carry; ECDSA keys must be
// on P-256, P-384 or P-521. Any other key is refused.
const MinRSABits = 2048

// KeyError is a CSR whose key is weaker than the mesh's minimum, or of a
// kind it does not sign.
type KeyError struct{ Reason string }

func (e *KeyError) Error() string { return e.Reason }

// ParseCSR reads a certificate request's DER bytes and checks what a
// signer must before trusting anything in it: it parses, its signature
// verifies with its own key (the requester holds that key), and the key is
// at least the mesh's minimum (*KeyError otherwise).
func ParseCSR(der []byte) (*x509.CertificateRequest, error) {
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("the CSR does not parse: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the CSR's signature does not verify with its own key: %w", err)
	}
	if err := checkKey(csr.PublicKey); err != nil {
		return nil, err
	}
	return csr, nil
}

// checkKey refuses a key weaker than the mesh's minimum.
func checkKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return &KeyError{Reason: fmt.Sprintf("the CSR's ECDSA key is on curve %s: the mesh signs P-256, P-384 or P-521", k.Curve.Params().Name)}
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < MinRSABits {
			return &KeyError{Reason: fmt.Sprintf("the CSR's RSA key has %d bits: the mesh signs RSA keys of %d bits or more", n, MinRSABits)}
		}
		return nil
	}
	return &KeyError{Reason: fmt.Sprintf("the CSR's key is a %T: the mesh signs ECDSA (P-256 or larger) and RSA (%d bits or more) keys only", pub, MinRSABits)}
}

// Leaf is a certificate the authority signed for a CSR.
type Leaf struct {
	Cert *x509.Certificate
	// Chain is the leaf and the intermediate that signed it, PEM-encoded:
	// what a TLS server presents.
	Chain []byte
}

// SignCSR signs a server leaf for csr's key naming exactly names (DNS
// names, checked by the caller against what the requester may hold), valid
// from now for lifetime, with the serverAuth usage only. A name the current
// intermediate's constraints do not permit is refused: its leaf would not
// verify.
func (a *Authority) SignCSR(csr *x509.CertificateRequest, names []string, now time.Time, lifetime time.Duration) (Leaf, error) {
	if len(names) == 0 {
		return Leaf{}, errors.New("sign a leaf: no name to sign")
	}
	if err := checkKey(csr.PublicKey); err != nil {
		return Leaf{}, err
	}
	usage := x509.KeyUsageDigitalSignature
	if _, ok := csr.PublicKey.(*rsa.PublicKey); ok {
		usage |= x509.KeyUsageKeyEncipherment
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     append([]string(nil), names...),
		NotBefore:    now.Add(-Backdate(lifetime)),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     usage,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if err := permits(a.inter, names); err != nil {
		return Leaf{}, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.inter, csr.PublicKey, a.interKey)
	if err != nil {
		return Leaf{}, fmt.Errorf("sign leaf for %v: %w", names, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return Leaf{}, fmt.Errorf("parse the leaf signed for %v: %w", names, err)
	}
	return Leaf{Cert: cert, Chain: append(certPEM(der), a.interPEM...)}, nil
}

// Backdate is how far before its signing a leaf of lifetime is valid from,
// for clocks a little behind: five minutes, or a tenth of the lifetime when
// that is shorter. A renewal comes when a third of the validity (from
// NotBefore) is left, so a fixed five minutes on a leaf of a minute would
// put it in its renewal window from the start and have it renewed at every
// check; a tenth keeps the renewal near two thirds of the lifetime.
func Backdate(lifetime time.Duration) time.Duration {
	return min(5*time.Minute, lifetime/10)
}

// ConstraintError is a name the intermediate may not sign.
type ConstraintError struct {
	Name      string
	Permitted []string
}

func (e *ConstraintError) Error() string {
	return fmt.Sprintf("%s is outside the names the mesh's intermediate may sign (%s): mesh ca domain add adds a domain",
		e.Name, strings.Join(e.Permitted, ", "))
}

// permits refuses a name outside inter's DNS constraints (none: every name
// is permitted).
func permits(inter *x509.Certificate, names []string) error {
	if len(inter.PermittedDNSDomains) == 0 {
		return nil
	}
	for _, n := range names {
		if !Permits(inter.PermittedDNSDomains, n) {
			return &ConstraintError{Name: n, Permitted: inter.PermittedDNSDomains}
		}
	}
	return nil
}

// Permits reports whether name lies under one of domains as an x509 DNS
// name constraint reads them: the domain itself or a name below it.
func Permits(domains []string, name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, d := range domains {
		d = strings.ToLower(d)
		if name == d || strings.HasSuffix(name, "."+d) {
			return true
		}
	}
	return false
}

// SerialOf is cert's serial in lower-case hex, as openssl x509 -serial
// prints it (less its case).
func SerialOf(cert *x509.Certificate) string {
	b := cert.SerialNumber.Bytes()
	if len(b) == 0 {
		return "00"
	}
	return hex.EncodeToString(b)
}
