package host

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// edgeTargetKey is the context key of the route a request goes to.
type edgeTargetKey struct{}

// proxy is the edge's HTTPS handler: a request for a public name the held
// roster serves goes to its route's node and port, over TLS verified
// against the mesh's root for the route's internal name when the route
// says so; one for any other name gets a 421 and no page.
func (s *edgeServe) proxy() http.Handler {
	plain := s.transport(nil)
	var secure http.RoundTripper = plain
	pool := x509.NewCertPool()
	if pool.AppendCertsFromPEM([]byte(s.edge.caRoot)) {
		secure = s.transport(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	}
	rp := &httputil.ReverseProxy{
		BufferPool: &edgeBuffers{},
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(edgeTargetKey{}).(edgeTarget)
			scheme := "http"
			if t.tls {
				scheme = "https"
			}
			pr.SetURL(&url.URL{Scheme: scheme, Host: net.JoinHostPort(t.internal, strconv.Itoa(t.port))})
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
		},
		Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.URL.Scheme == "https" {
				if secure == plain {
					return nil, fmt.Errorf("the host holds no mesh root to verify %s against", r.URL.Host)
				}
				return secure.RoundTrip(r)
			}
			return plain.RoundTrip(r)
		}),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(edgeTargetKey{}).(edgeTarget)
			s.log.Warn("backend did not answer", "name", r.Host, "route", t.internal, "err", err)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprintf(w, "502 bad gateway: %s (module %s on node %s) does not answer on port %d\n", t.internal, t.module, t.nodeName, t.port)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, ok := s.edge.target(hostOnly(r.Host))
		if !ok {
			http.Error(w, "421 misdirected request: this edge serves no such name", http.StatusMisdirectedRequest)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), edgeTargetKey{}, t)))
	})
}

// transport reaches a backend by its internal name, at its node's address
// as the held roster gives it; tc nil: plain HTTP.
func (s *edgeServe) transport(tc *tls.Config) *http.Transport {
	d := &net.Dialer{Timeout: s.timeouts.backendDial}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			at, ok := s.edge.backend(host)
			if !ok {
				return nil, fmt.Errorf("the roster holds no route %s", host)
			}
			return d.DialContext(ctx, network, net.JoinHostPort(at, port))
		},
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   s.timeouts.backendDial,
		ResponseHeaderTimeout: s.timeouts.backendHeader,
		IdleConnTimeout:       s.timeouts.idle,
		MaxIdleConnsPerHost:   edgeBackendIdle,
	}
}

// edgeBackendIdle is how many idle connections the edge keeps to one
// backend: more than it has requests to that backend at once, so every
// connection goes back to the pool after its response and none is closed
// and dialled again under load (idle ones close after the idle timeout).
const edgeBackendIdle = 1024

// edgeBufferSize is the size of the buffers a response's body is copied
// through, httputil.ReverseProxy's own.
const edgeBufferSize = 32 << 10

// edgeBuffers is the proxy's httputil.BufferPool: a response's body is
// copied through a buffer used before, not one allocated a request.
type edgeBuffers struct{ pool sync.Pool }

func (b *edgeBuffers) Get() []byte {
	if p, ok := b.pool.Get().(*[edgeBufferSize]byte); ok {
		return p[:]
	}
	return new([edgeBufferSize]byte)[:]
}

func (b *edgeBuffers) Put(buf []byte) {
	if len(buf) == edgeBufferSize {
		b.pool.Put((*[edgeBufferSize]byte)(buf))
	}
}

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// hostOnly is a Host header without its port.
func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return strings.TrimSuffix(h, ".")
}

// redirect is the edge's plain HTTP: a public name the held roster serves
// is redirected to HTTPS (ACME's challenges are answered before it); any
// other name gets a 421 and no page.
func (s *edgeServe) redirect(w http.ResponseWriter, r *http.Request) {
	host := hostOnly(r.Host)
	if _, ok := s.edge.target(host); !ok {
		http.Error(w, "421 misdirected request: this edge serves no such name", http.StatusMisdirectedRequest)
		return
	}
	if _, port, err := net.SplitHostPort(s.spec.HTTPS); err == nil && port != "443" {
		host = net.JoinHostPort(host, port)
	}
	http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
}
