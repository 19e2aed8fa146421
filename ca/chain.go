package ca

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// MaxChain caps the intermediates a chain handed to a host may hold: the
// controller sends the one that signs now; a few more leave room for an
// overlap, never for a bundle of strangers.
const MaxChain = 8

// ChainPEM is certs, PEM-encoded one after the other.
func ChainPEM(certs ...*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		b.Write(certPEM(c.Raw))
	}
	return b.Bytes()
}

// ParseChain reads chainPEM, the mesh's intermediates a declaration
// carries (the one that signs now first), and checks each against root as
// of now: a CA certificate that root signed, valid now. A chain that holds
// anything else, nothing, data after its last certificate or more than
// MaxChain certificates is refused, saying what was wrong.
func ParseChain(chainPEM []byte, root *x509.Certificate, now time.Time) ([]*x509.Certificate, error) {
	if root == nil {
		return nil, errors.New("no root to check the chain against")
	}
	certs, err := readPEMChain(chainPEM, MaxChain)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	for i, c := range certs {
		if !c.IsCA || !c.BasicConstraintsValid {
			return nil, fmt.Errorf("certificate %d of the chain (serial %s) is not a CA", i+1, SerialOf(c))
		}
		if c.Equal(root) {
			return nil, fmt.Errorf("certificate %d of the chain is the root itself, not an intermediate", i+1)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return nil, fmt.Errorf("intermediate %s does not verify against the pinned root: %w", SerialOf(c), err)
		}
	}
	return certs, nil
}

// readPEMChain reads the certificates of chainPEM, at most max of them (0:
// any number). Anything but CERTIFICATE blocks, data after the last one, a
// certificate that does not parse, or none at all is refused, saying what
// was wrong.
func readPEMChain(chainPEM []byte, max int) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := chainPEM
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("the chain holds a %q PEM block, not a certificate", block.Type)
		}
		if max > 0 && len(certs) == max {
			return nil, fmt.Errorf("the chain holds more than %d certificates", max)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the chain does not parse: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	switch {
	case len(bytes.TrimSpace(rest)) > 0 && len(certs) == 0:
		return nil, errors.New("the chain has data after its last certificate, or is not PEM: it holds no certificate")
	case len(bytes.TrimSpace(rest)) > 0:
		return nil, errors.New("the chain has data after its last certificate, or is not PEM")
	case len(certs) == 0:
		return nil, errors.New("the chain holds no certificate")
	}
	return certs, nil
}
