package ca

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
)

// CertPEM is the prepared intermediate, PEM-encoded.
func (p *Pending) CertPEM() []byte { return append([]byte(nil), p.certPEM...) }

// KeyPEM is the prepared intermediate's private key, PEM-encoded: a
// secret, to be kept only sealed.
func (p *Pending) KeyPEM() []byte { return keyPEM(p.key) }

// Adopt makes the intermediate certPEM, whose key is keyPEM, the one that
// signs, as Commit does for one prepared here: another controller of the
// mesh issued it. It must be signed by this authority's root, and the key
// must be its. The one current already is kept as it is.
func (a *Authority) Adopt(certPEM, keyPEM []byte) error {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return fmt.Errorf("adopt an intermediate: %w", err)
	}
	if err := cert.CheckSignatureFrom(a.root); err != nil {
		return fmt.Errorf("adopt intermediate %s: it is not signed by this mesh's root: %w", SerialOf(cert), err)
	}
	if !cert.IsCA {
		return fmt.Errorf("adopt intermediate %s: it is no CA certificate", SerialOf(cert))
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return fmt.Errorf("adopt intermediate %s: its key holds no PEM block", SerialOf(cert))
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil {
		return fmt.Errorf("adopt intermediate %s: its key: %w", SerialOf(cert), err)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return fmt.Errorf("adopt intermediate %s: the key is not its", SerialOf(cert))
	}
	if a.Intermediate().Equal(cert) {
		return nil
	}
	if err := os.MkdirAll(filepath.Join(a.dir, keptDir), 0o700); err != nil {
		return fmt.Errorf("adopt intermediate %s: %w", SerialOf(cert), err)
	}
	if err := a.removeUncommitted(); err != nil {
		return err
	}
	p := &Pending{a: a, cert: cert, key: key, certPEM: certPEM,
		certPath: filepath.Join(a.dir, keptDir, SerialOf(cert)+pendingExt),
		keyPath:  filepath.Join(a.dir, keptDir, SerialOf(cert)+".key")}
	if err := writeSynced(p.keyPath, keyPEM, 0o600); err != nil {
		p.Discard()
		return fmt.Errorf("adopt intermediate %s: %w", SerialOf(cert), err)
	}
	if err := writeSynced(p.certPath, certPEM, 0o644); err != nil {
		p.Discard()
		return fmt.Errorf("adopt intermediate %s: %w", SerialOf(cert), err)
	}
	if err := p.Commit(); err != nil {
		p.Discard()
		return fmt.Errorf("adopt intermediate %s: %w", SerialOf(cert), err)
	}
	return nil
}
