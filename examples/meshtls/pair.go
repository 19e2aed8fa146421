package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// What a certificate resource keeps in its directory: the leaf and the
// intermediate (as a server presents them), the leaf's key, the mesh root,
// and the link to the version directory they are in, swapped in one rename
// when the certificate is renewed.
const (
	certFile = "cert.pem"
	keyFile  = "key.pem"
	caFile   = "ca.pem"
	dataLink = "..data"
)

// pairSource is the certificate kept in dir, read again when what dir
// holds changes: by the target of its ..data link, or, in a directory
// without one, by the identity and modification time of cert.pem and
// key.pem. A pair that cannot be read leaves the one read before in use.
type pairSource struct {
	dir string
	log *slog.Logger

	mu      sync.Mutex
	version string           // what pair was read from
	pair    *tls.Certificate // nil until one was read
	failed  string           // the last failure logged, so it is logged once
}

// get is the certificate to present in a handshake (tls.Config's
// GetCertificate).
func (p *pairSource) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	version, from, err := p.locate()
	if err == nil && version == p.version && p.pair != nil {
		return p.pair, nil
	}
	var pair *tls.Certificate
	if err == nil {
		pair, err = load(from)
		if errors.Is(err, fs.ErrNotExist) && strings.HasPrefix(version, dataLink) {
			// The version directory went between the link's read and the
			// files': it was swapped again. Once more, from the new one.
			if version, from, err = p.locate(); err == nil {
				pair, err = load(from)
			}
		}
	}
	if err != nil {
		if msg := err.Error(); msg != p.failed {
			p.failed = msg
			if p.pair != nil {
				p.log.Error("certificate not read; serving the one read before", "dir", p.dir, "err", err, "serial", p.pair.Leaf.SerialNumber.Text(16))
			} else {
				p.log.Error("no certificate to serve yet; handshakes fail until it is there", "dir", p.dir, "err", err)
			}
		}
		if p.pair != nil {
			return p.pair, nil
		}
		return nil, fmt.Errorf("no certificate to serve from %s: %w", p.dir, err)
	}
	p.version, p.pair, p.failed = version, pair, ""
	p.log.Info("certificate read", "dir", p.dir, "from", from, "names", strings.Join(pair.Leaf.DNSNames, ","),
		"serial", pair.Leaf.SerialNumber.Text(16), "not_after", pair.Leaf.NotAfter)
	return pair, nil
}

// locate is the version of the pair dir holds now, and the directory to
// read it from.
func (p *pairSource) locate() (version, from string, err error) {
	target, err := os.Readlink(filepath.Join(p.dir, dataLink))
	switch {
	case err == nil:
		from = target
		if !filepath.IsAbs(target) {
			from = filepath.Join(p.dir, target)
		}
		return dataLink + " -> " + target, from, nil
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL):
		// No ..data link (or not a link): the files themselves.
		var parts []string
		for _, name := range []string{certFile, keyFile} {
			info, err := os.Stat(filepath.Join(p.dir, name))
			if err != nil {
				return "", "", fmt.Errorf("read the certificate: %w", err)
			}
			var ino uint64
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				ino = st.Ino
			}
			parts = append(parts, fmt.Sprintf("%s ino %d size %d mtime %d", name, ino, info.Size(), info.ModTime().UnixNano()))
		}
		return strings.Join(parts, ", "), p.dir, nil
	default:
		return "", "", fmt.Errorf("read the certificate's link: %w", err)
	}
}

// load reads the pair in dir: cert.pem's certificates, key.pem's key, which
// must be the first certificate's.
func load(dir string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, certFile))
	if err != nil {
		return nil, fmt.Errorf("read the certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, keyFile))
	if err != nil {
		return nil, fmt.Errorf("read the certificate's key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the pair in %s: %w", dir, err)
	}
	return &pair, nil
}
