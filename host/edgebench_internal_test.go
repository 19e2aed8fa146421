package host

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/spec"
)

// BenchmarkEdgeProxy: requests through the edge's HTTPS listener (its
// certmagic TLS config, its handler) to a plain HTTP backend, against a
// bare httputil.ReverseProxy behind Go's TLS (the same rewrite, enough
// idle connections to the backend) and the backend alone, each
// with 16 clients a core on HTTP/1.1 keep-alive connections of their own.
// Besides ns/op and allocs/op (the clients' and the backend's included,
// the same in every case), dials/op is how many connections the backend
// took a request: near 0 when the proxy keeps its connections alive.
func BenchmarkEdgeProxy(b *testing.B) {
	const name = "www.example.test"
	cert, roots := edgeBenchCert(b, name)
	var dials atomic.Int64
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "hello from the backend\n")
	}))
	backend.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	backend.Start()
	b.Cleanup(backend.Close)

	// The edge, serving name with cert instead of one from a CA: the
	// names are held and no certificate is managed, so no CA is asked.
	g := newEdge(filepath.Join(b.TempDir(), EdgeDir), "", slog.New(slog.DiscardHandler))
	b.Cleanup(g.stop)
	at := backend.Listener.Addr().(*net.TCPAddr)
	g.names = edgeTargets(spec.Roster{Routes: []spec.RosterRoute{
		{Name: spec.RouteName("www", "alpha"), Node: "alpha", Address: at.IP.String(), Port: at.Port, Module: "www"},
		{Name: name, Node: "alpha", Address: at.IP.String(), Port: at.Port, Module: "www", Public: true},
	}})
	e := spec.EdgeSpec{Name: "edge", HTTP: testport.Addr(b, "127.0.0.1"), HTTPS: testport.Addr(b, "127.0.0.1"), ACMECA: "https://127.0.0.1:9/dir"}
	s, err := g.start(e)
	if err != nil {
		b.Fatal(err)
	}
	g.serves = s
	if _, err := s.magic.CacheUnmanagedTLSCertificate(context.Background(), cert, nil); err != nil {
		b.Fatal(err)
	}

	target, err := url.Parse(backend.URL)
	if err != nil {
		b.Fatal(err)
	}
	// The bare proxy keeps as many connections to the backend as it has
	// clients (http.DefaultTransport keeps 2).
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	b.Cleanup(tr.CloseIdleConnections)
	bare := httptest.NewUnstartedServer(&httputil.ReverseProxy{Transport: tr, Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.SetXForwarded()
		pr.Out.Host = pr.In.Host
	}})
	bare.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	bare.StartTLS()
	b.Cleanup(bare.Close)

	for _, c := range []struct{ name, url, addr string }{
		{"edge", "https://" + name + "/", e.HTTPS},
		{"reverseproxy", "https://" + name + "/", bare.Listener.Addr().String()},
		{"backend", backend.URL + "/", backend.Listener.Addr().String()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(16)
			before := dials.Load()
			b.RunParallel(func(pb *testing.PB) {
				client := edgeBenchClient(c.addr, roots)
				defer client.CloseIdleConnections()
				for pb.Next() {
					res, err := client.Get(c.url)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						b.Errorf("%s: %s", c.url, res.Status)
						return
					}
				}
			})
			b.ReportMetric(float64(dials.Load()-before)/float64(b.N), "dials/op")
		})
	}
}

// edgeBenchClient is a client of one HTTP/1.1 keep-alive connection to
// addr, whatever the URL's host, verifying against roots.
func edgeBenchClient(addr string, roots *x509.CertPool) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig:     &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 1,
		MaxConnsPerHost:     1,
	}}
}

// edgeBenchCert is a self-signed ECDSA P-256 certificate for name (the
// key certmagic makes), and a pool holding it.
func edgeBenchCert(tb testing.TB, name string) (tls.Certificate, *x509.CertPool) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(30 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
