package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Permitted is the DNS domains the current intermediate may sign names
// under (each domain and every name below it); nil when it is
// unconstrained (a mesh created before constraints).
func (a *Authority) Permitted() []string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return slices.Clone(a.inter.PermittedDNSDomains)
}

// Intermediate is the current intermediate: the one that signs.
func (a *Authority) Intermediate() *x509.Certificate {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.inter
}

// Intermediates are the current intermediate and those it replaced, newest
// first: the leaves each signed verify until they expire.
func (a *Authority) Intermediates() []*x509.Certificate {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := []*x509.Certificate{a.inter}
	for i := len(a.kept) - 1; i >= 0; i-- {
		out = append(out, a.kept[i])
	}
	return out
}

// Pending is a new intermediate written under the authority's directory
// but not yet the one that signs: Commit makes it so, Discard removes it.
// A caller that must record something with the change records it between
// the two, so a failure on either side leaves the authority as it was, or
// as the record says.
type Pending struct {
	a         *Authority
	cert      *x509.Certificate
	key       *ecdsa.PrivateKey
	certPEM   []byte
	certPath  string
	keyPath   string
	committed bool
}

// Serial is the new intermediate's serial, as SerialOf writes it.
func (p *Pending) Serial() string { return SerialOf(p.cert) }

// Prepare signs a new intermediate under the same root, constrained to
// permitted, with a new key, and writes it as intermediates/<serial>.pending
// and <serial>.key (0600), synced: nothing signs with it yet, and Load
// reads neither. It needs the root's key (root.key, which Create keeps).
// What an earlier Prepare left uncommitted (a crash) is removed first.
func (a *Authority) Prepare(permitted []string, now time.Time) (*Pending, error) {
	if len(permitted) == 0 {
		return nil, errors.New("reissue the intermediate: no domain to constrain it to")
	}
	rootKey, err := readECKey(filepath.Join(a.dir, rootKeyFile))
	if err != nil {
		return nil, fmt.Errorf("reissue the intermediate: the root's key is needed: %w", err)
	}
	if pub, ok := a.root.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&rootKey.PublicKey) {
		return nil, fmt.Errorf("reissue the intermediate: %s does not belong to %s", rootKeyFile, rootCertFile)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate intermediate key: %w", err)
	}
	der, err := signIntermediate(a.root, rootKey, &key.PublicKey, permitted, now)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse the new intermediate: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(a.dir, keptDir), 0o700); err != nil {
		return nil, fmt.Errorf("reissue the intermediate: %w", err)
	}
	if err := a.removeUncommitted(); err != nil {
		return nil, err
	}
	p := &Pending{a: a, cert: cert, key: key, certPEM: certPEM(der),
		certPath: filepath.Join(a.dir, keptDir, SerialOf(cert)+pendingExt),
		keyPath:  filepath.Join(a.dir, keptDir, SerialOf(cert)+".key")}
	if err := writeSynced(p.keyPath, keyPEM(key), 0o600); err != nil {
		p.Discard()
		return nil, err
	}
	if err := writeSynced(p.certPath, p.certPEM, 0o644); err != nil {
		p.Discard()
		return nil, err
	}
	return p, nil
}

// Commit makes the prepared intermediate the one that signs: the current
// one is kept as intermediates/<serial>.crt, then intermediate.crt is
// replaced in one rename, the step that decides (Load finds the key by the
// serial of intermediate.crt). The replaced intermediate's key is removed
// last; a failure to remove it leaves a key nothing reads.
func (p *Pending) Commit() error {
	a := p.a
	a.mu.Lock()
	defer a.mu.Unlock()
	old, oldPEM, oldKey := a.inter, a.interPEM, a.keyPath
	keep := filepath.Join(a.dir, keptDir, SerialOf(old)+".crt")
	if err := writeSynced(keep, oldPEM, 0o644); err != nil {
		return fmt.Errorf("keep the replaced intermediate: %w", err)
	}
	if err := writeAtomic(filepath.Join(a.dir, interCertFile), p.certPEM, 0o644); err != nil {
		return fmt.Errorf("make the new intermediate current: %w", err)
	}
	p.committed = true
	a.inter, a.interKey, a.interPEM, a.keyPath = p.cert, p.key, p.certPEM, p.keyPath
	a.kept = append(a.kept, old)
	os.Remove(p.certPath)
	os.Remove(oldKey)
	return nil
}

// pendingExt ends a prepared intermediate's file until it is committed.
const pendingExt = ".pending"

// removeUncommitted removes what a Prepare left without Commit or Discard:
// each .pending file and the key beside it, unless that key is the current
// one's.
func (a *Authority) removeUncommitted() error {
	dir := filepath.Join(a.dir, keptDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read kept intermediates: %w", err)
	}
	a.mu.RLock()
	current := a.keyPath
	a.mu.RUnlock()
	for _, e := range entries {
		s, ok := strings.CutSuffix(e.Name(), pendingExt)
		if !ok {
			continue
		}
		if key := filepath.Join(dir, s+".key"); key != current {
			os.Remove(key)
		}
		os.Remove(filepath.Join(dir, e.Name()))
	}
	return nil
}

// Discard removes a prepared intermediate that was not committed.
func (p *Pending) Discard() {
	if p.committed {
		return
	}
	os.Remove(p.keyPath)
	os.Remove(p.certPath)
}

// Reissue replaces the intermediate by a new one under the same root,
// constrained to permitted: Prepare, then Commit.
func (a *Authority) Reissue(permitted []string, now time.Time) error {
	p, err := a.Prepare(permitted, now)
	if err != nil {
		return err
	}
	if err := p.Commit(); err != nil {
		p.Discard()
		return err
	}
	return nil
}

// IntermediatePEM is the current intermediate, PEM-encoded.
func (a *Authority) IntermediatePEM() []byte {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return slices.Clone(a.interPEM)
}

// writeSynced writes data to path with mode, synced to disk.
func writeSynced(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("write CA file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write CA file %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write CA file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write CA file %s: %w", path, err)
	}
	return nil
}

// writeAtomic replaces path by data: a temporary file, synced, renamed, and
// the directory synced.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := writeSynced(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write CA file %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("sync CA directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync CA directory: %w", err)
	}
	return nil
}

// Dir is the directory the authority keeps its files in.
func (a *Authority) Dir() string { return a.dir }
