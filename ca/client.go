package ca

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// ClientTLS is the TLS configuration of a client of the mesh's bus that
// trusts only root. serverName is the name the bus's certificate carries.
func ClientTLS(root *x509.Certificate, serverName string) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(root)
	return &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}
}

// HeldTLS is ClientTLS for a client that also holds intermediates of the
// mesh (a host keeps the chain its last declaration carried): the bus's
// certificate must verify for serverName against root, through the
// intermediates it presents or those held returns at the handshake. It is
// Go's verification with a wider pool of intermediates, never a narrower
// one: the root stays the only anchor.
func HeldTLS(root *x509.Certificate, serverName string, held func() []*x509.Certificate) *tls.Config {
	roots := x509.NewCertPool()
	roots.AddCert(root)
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         serverName,
		InsecureSkipVerify: true, // replaced by VerifyConnection below, which verifies the whole chain
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the bus presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if held != nil {
				for _, c := range held() {
					inter.AddCert(c)
				}
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: serverName, Roots: roots, Intermediates: inter}); err != nil {
				return fmt.Errorf("verify the bus's certificate against the mesh's root: %w", err)
			}
			return nil
		},
	}
}

// PinnedTLS is the TLS configuration of a client that holds only the root's
// pin (a joining host). The handshake fails unless the server's chain
// contains a root with that pin which verifies the chain. found receives the
// root once it has been checked.
func PinnedTLS(pin, serverName string, found func(*x509.Certificate)) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // replaced by VerifyPeerCertificate below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("the bus presented no certificate")
			}
			var certs []*x509.Certificate
			for _, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return fmt.Errorf("the bus presented a certificate that does not parse: %w", err)
				}
				certs = append(certs, c)
			}
			var root *x509.Certificate
			for _, c := range certs {
				if c.IsCA && Pin(c) == pin {
					root = c
				}
			}
			if root == nil {
				return fmt.Errorf("the bus's certificate chain holds no root with pin %s: this is not the mesh the token was made for", pin)
			}
			roots := x509.NewCertPool()
			roots.AddCert(root)
			inter := x509.NewCertPool()
			for _, c := range certs[1:] {
				inter.AddCert(c)
			}
			if _, err := certs[0].Verify(x509.VerifyOptions{DNSName: serverName, Roots: roots, Intermediates: inter}); err != nil {
				return fmt.Errorf("verify the bus's certificate against the pinned root: %w", err)
			}
			if found != nil {
				found(root)
			}
			return nil
		},
	}
}
