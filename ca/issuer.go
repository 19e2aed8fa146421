package ca

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"

	"github.com/caddyserver/certmagic"
)

// Issuer is a host's certmagic Issuer: certmagic makes the key and the CSR
// (the key never leaves the host's storage), Sign carries the CSR to the
// controller over the node's own bus subject, and the chain that comes back
// is checked before certmagic keeps it: it must verify against the mesh's
// root, hold the CSR's key and name exactly the names asked for. A chain
// that does not is refused, so a broken or impersonated controller cannot
// hand the host a certificate it did not ask for.
type Issuer struct {
	// Mesh names the mesh: certificates of one mesh are kept apart from
	// another's in certmagic's storage (IssuerKey).
	Mesh string
	// Root is the mesh's root the host pinned at join.
	Root *x509.Certificate
	// Sign sends a DER CSR to the controller and returns the chain it
	// signed: the leaf then its intermediate, PEM.
	Sign func(ctx context.Context, csrDER []byte) ([]byte, error)
	// Held, when set, is the chain the host keeps (the intermediates its
	// last declaration carried): checked beside those the controller's
	// answer holds, the root still the only anchor.
	Held func() []*x509.Certificate
}

var _ certmagic.Issuer = (*Issuer)(nil)

// IssuerKey keeps this mesh's certificates under their own directory of
// certmagic's storage.
func (i *Issuer) IssuerKey() string { return "mesh-" + i.Mesh }

// Issue has the controller sign csr and checks what it signed.
func (i *Issuer) Issue(ctx context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	if i.Sign == nil || i.Root == nil {
		return nil, errors.New("the mesh issuer has no controller to ask or no root to check against")
	}
	chain, err := i.Sign(ctx, csr.Raw)
	if err != nil {
		return nil, fmt.Errorf("have the controller sign %v: %w", csr.DNSNames, err)
	}
	var held []*x509.Certificate
	if i.Held != nil {
		held = i.Held()
	}
	if err := CheckChain(chain, i.Root, csr, held...); err != nil {
		return nil, fmt.Errorf("the controller's certificate for %v: %w", csr.DNSNames, err)
	}
	return &certmagic.IssuedCertificate{Certificate: chain}, nil
}

// CheckChain checks that chainPEM (a leaf, then the intermediates that sign
// it) verifies against root for server authentication, through its own
// intermediates or those held, that the leaf holds csr's public key, and
// that it names exactly csr's DNS names.
func CheckChain(chainPEM []byte, root *x509.Certificate, csr *x509.CertificateRequest, held ...*x509.Certificate) error {
	certs, err := readPEMChain(chainPEM, 0)
	if err != nil {
		return err
	}
	leaf := certs[0]
	roots := x509.NewCertPool()
	roots.AddCert(root)
	inter := x509.NewCertPool()
	for _, c := range append(certs[1:], held...) {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("it does not verify against the mesh's root: %w", err)
	}
	want, err := x509.MarshalPKIXPublicKey(csr.PublicKey)
	if err != nil {
		return fmt.Errorf("read the CSR's public key: %w", err)
	}
	got, err := x509.MarshalPKIXPublicKey(leaf.PublicKey)
	if err != nil {
		return fmt.Errorf("read the leaf's public key: %w", err)
	}
	if !bytes.Equal(want, got) {
		return errors.New("the leaf holds another key than the CSR's")
	}
	a, b := slices.Clone(leaf.DNSNames), slices.Clone(csr.DNSNames)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		return fmt.Errorf("the leaf names %v, not the %v asked for", leaf.DNSNames, csr.DNSNames)
	}
	return nil
}
