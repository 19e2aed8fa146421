package host

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// CertmagicDir is where a host's certmagic keeps its certificates and keys,
// under the host's directory (D/host/certmagic).
const CertmagicDir = "certmagic"

// DefaultCertRenewCheck is how often certmagic looks for certificates to
// renew unless the host is told otherwise: its own default.
const DefaultCertRenewCheck = certmagic.DefaultRenewCheckInterval

// RenewalWindowRatio is the part of a certificate's validity left when
// certmagic renews it: a third, so a certificate is renewed at two thirds
// of its life.
const RenewalWindowRatio = 1.0 / 3

// certs is the host's certificate manager: one certmagic cache and config,
// its storage in the host's directory, its only issuer the mesh's CA,
// reached by a CSR on the node's own bus subject (ca.Issuer checks what
// comes back). certmagic makes the key and keeps it; it never leaves the
// host. certmagic's own maintenance renews what it manages; each renewal
// stored nudges renewed, so that the agent copies it where it is declared.
type certs struct {
	cache  *certmagic.Cache
	magic  *certmagic.Config
	issuer *ca.Issuer
	rootPM string // the mesh's root, PEM: what ca.pem holds
	// renewed hears of every renewal certmagic stored.
	renewed chan struct{}
	log     *slog.Logger

	mu sync.Mutex
	// declared are the names the certificate resources of the apply under
	// way declare (prepare): a name no longer among them is no longer
	// managed.
	declared map[string]bool
}

// certsConfig is what the manager is made with.
type certsConfig struct {
	dir        string // its storage
	mesh       string
	root       *x509.Certificate
	rootPEM    string
	renewCheck time.Duration // how often certmagic looks for what to renew; zero: its default
	sign       func(ctx context.Context, csrDER []byte) ([]byte, error)
	// held is the CA chain the host holds, checked beside the root and
	// the answer's own intermediates (ca.Issuer.Held).
	held func() []*x509.Certificate
}

// newCerts makes the manager and starts certmagic's maintenance (its
// renewal checks), which stop runs down.
func newCerts(cfg certsConfig, log *slog.Logger) *certs {
	c := &certs{issuer: &ca.Issuer{Mesh: cfg.mesh, Root: cfg.root, Sign: cfg.sign, Held: cfg.held}, rootPM: cfg.rootPEM,
		renewed: make(chan struct{}, 1), log: log}
	c.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return c.magic, nil },
		RenewCheckInterval: cfg.renewCheck,
		Logger:             certmagicLogger(log),
	})
	c.magic = certmagic.New(c.cache, certmagic.Config{
		RenewalWindowRatio: RenewalWindowRatio,
		Storage:            &certmagic.FileStorage{Path: cfg.dir},
		Issuers:            []certmagic.Issuer{c.issuer},
		OCSP:               certmagic.OCSPConfig{DisableStapling: true},
		DisableARI:         true,
		Logger:             certmagicLogger(log),
		OnEvent:            c.onEvent,
	})
	return c
}

// stop ends certmagic's maintenance: nothing is renewed after it.
func (c *certs) stop() { c.cache.Stop() }

// onEvent logs what certmagic did, and nudges renewed when it stored a
// renewal.
func (c *certs) onEvent(_ context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch event {
	case "cert_obtaining":
		c.log.Debug("certificate requested from the controller", "name", name, "renewal", renewal)
	case "cert_obtained":
		c.log.Info(map[bool]string{false: "certificate obtained", true: "certificate renewed"}[renewal], "name", name)
		if renewal {
			select {
			case c.renewed <- struct{}{}:
			default:
			}
		}
	case "cert_failed":
		// A first obtain that failed fails its resource, which the apply
		// reports (and does not repeat); a renewal has no other voice.
		if renewal {
			c.log.Warn("certificate not renewed; certmagic tries again", "name", name, "err", data["error"])
		}
	}
	return nil
}

// obtain has certmagic manage name: the certificate it keeps is loaded (and
// renewed if it is due), or obtained from the controller when it keeps
// none. A name already managed is nothing to do.
func (c *certs) obtain(ctx context.Context, name string) error {
	if err := c.magic.ManageSync(ctx, []string{name}); err != nil {
		return fmt.Errorf("obtain the certificate for %s: %w", name, err)
	}
	return nil
}

// pair is a certificate and its key as certmagic keeps them.
type pair struct {
	chain, key []byte // PEM: the leaf then its intermediate; the key
	leaf       *x509.Certificate
	serial     string
}

// current is the certificate certmagic keeps for name, read from its
// storage; ok is false when it keeps none. certmagic stores the key and
// then the certificate, so a read between the two is read again.
func (c *certs) current(ctx context.Context, name string) (pair, bool, error) {
	key := c.issuer.IssuerKey()
	var mismatch error
	for range 20 {
		chain, err := c.magic.Storage.Load(ctx, certmagic.StorageKeys.SiteCert(key, name))
		if errors.Is(err, fs.ErrNotExist) {
			return pair{}, false, nil
		}
		if err != nil {
			return pair{}, false, fmt.Errorf("read the certificate for %s in certmagic's storage: %w", name, err)
		}
		keyPEM, err := c.magic.Storage.Load(ctx, certmagic.StorageKeys.SitePrivateKey(key, name))
		if errors.Is(err, fs.ErrNotExist) {
			return pair{}, false, nil
		}
		if err != nil {
			return pair{}, false, fmt.Errorf("read the key for %s in certmagic's storage: %w", name, err)
		}
		p, err := parsePair(chain, keyPEM)
		if err == nil {
			return p, true, nil
		}
		mismatch = err
		select {
		case <-ctx.Done():
			return pair{}, false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return pair{}, false, fmt.Errorf("the certificate for %s in certmagic's storage: %w", name, mismatch)
}

// parsePair reads a chain and its key, which must match.
func parsePair(chain, key []byte) (pair, error) {
	tc, err := tls.X509KeyPair(chain, key)
	if err != nil {
		return pair{}, fmt.Errorf("the certificate and key do not make a pair: %w", err)
	}
	leaf, err := x509.ParseCertificate(tc.Certificate[0])
	if err != nil {
		return pair{}, fmt.Errorf("the certificate does not parse: %w", err)
	}
	return pair{chain: chain, key: key, leaf: leaf, serial: ca.SerialOf(leaf)}, nil
}

// prepare notes the names the resources of an apply declare.
func (c *certs) prepare(resources []spec.Resource) {
	names := map[string]bool{}
	for _, r := range resources {
		if cs, ok := spec.As[*spec.CertificateSpec](r); ok && cs != nil {
			names[cs.Name] = true
		}
	}
	c.mu.Lock()
	c.declared = names
	c.mu.Unlock()
}

// forget stops managing name, unless a resource of the apply under way
// still declares it: certmagic renews it no more, and its certificate and
// key go from certmagic's storage.
func (c *certs) forget(ctx context.Context, name string) error {
	c.mu.Lock()
	held := c.declared[name]
	c.mu.Unlock()
	if held {
		return nil
	}
	c.cache.RemoveManaged([]certmagic.SubjectIssuer{{Subject: name}})
	prefix := certmagic.StorageKeys.CertsSitePrefix(c.issuer.IssuerKey(), name)
	if err := c.magic.Storage.Delete(ctx, prefix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the certificate for %s from certmagic's storage: %w", name, err)
	}
	return nil
}

// busSigner has the controller sign a CSR: a request on the node's own CSR
// subject, answered under its inbox (the connection's inbox prefix), in the
// reply envelope, within request's timeout.
func busSigner(nc *nats.Conn, node string) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, der []byte) ([]byte, error) {
		var res spec.CSRResult
		if err := request(ctx, nc, spec.NodeSubject(node, spec.KindCSR), spec.CSRRequest{CSR: der}, &res); err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(res.Chain)) == 0 {
			return nil, errors.New("the controller answered with no certificate")
		}
		return res.Chain, nil
	}
}
