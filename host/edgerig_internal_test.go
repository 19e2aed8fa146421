package host

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/spec"
)

// edgeRig is a test's edges against a Pebble of its own: the listen
// addresses Pebble validates on, one storage directory the edges share
// (as one host's edges, one after the other, do), one log.
type edgeRig struct {
	pb                  *pebbletest.Pebble
	httpAddr, httpsAddr string
	httpsPort           int
	dir                 string
	roots               *x509.CertPool // Pebble's issuing root
	logs                *lockedBuffer
	log                 *slog.Logger
}

// newEdgeRig starts Pebble as opts say, on ports the test holds.
func newEdgeRig(t *testing.T, opts ...pebbletest.Option) *edgeRig {
	t.Helper()
	return newEdgeRigValidating(t, func(httpPort, httpsPort int) (int, int) { return httpPort, httpsPort }, opts...)
}

// newEdgeRigValidating is newEdgeRig with Pebble validating HTTP-01 and
// TLS-ALPN-01 on the ports ports gives for the edges' own.
func newEdgeRigValidating(t *testing.T, ports func(httpPort, httpsPort int) (int, int), opts ...pebbletest.Option) *edgeRig {
	t.Helper()
	r := &edgeRig{httpAddr: testport.Addr(t, "127.0.0.1"), httpsAddr: testport.Addr(t, "127.0.0.1"),
		dir: filepath.Join(t.TempDir(), EdgeDir), logs: &lockedBuffer{}}
	r.httpsPort = pebbletest.Port(t, r.httpsAddr)
	httpPort, tlsPort := ports(pebbletest.Port(t, r.httpAddr), r.httpsPort)
	r.pb = pebbletest.Start(t, httpPort, tlsPort, opts...)
	pemBytes, err := os.ReadFile(r.pb.Root)
	if err != nil {
		t.Fatal(err)
	}
	r.roots = x509.NewCertPool()
	if !r.roots.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("pebble's root %s holds no certificate", r.pb.Root)
	}
	r.log = slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the edges' log:\n%s", r.logs.String())
		}
	})
	return r
}

// edge is a new edge on the rig's storage, renewing as renew says,
// serving the public names of backends (name to backend URL) until the
// test ends.
func (r *edgeRig) edge(t *testing.T, renew edgeRenew, backends map[string]string) *edge {
	t.Helper()
	g := newEdge(r.dir, "", r.log)
	g.renew = renew
	r.serve(t, g, backends)
	return g
}

// serve has g, configured on the rig's addresses against its Pebble,
// serve the public names of backends (name to backend URL) until the
// test ends.
func (r *edgeRig) serve(t *testing.T, g *edge, backends map[string]string) {
	t.Helper()
	t.Cleanup(g.stop)
	g.take(edgeRoster(t, backends))
	e := spec.EdgeSpec{Name: "edge", HTTP: r.httpAddr, HTTPS: r.httpsAddr, ACMECA: r.pb.Directory, Email: "ops@example.org", ACMERoots: r.pb.TLSRoots}
	if err := g.configure(context.Background(), e); err != nil {
		t.Fatal(err)
	}
}

// leaf is the certificate the edge serves for name, its chain verified to
// Pebble's root.
func (r *edgeRig) leaf(name string) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", r.httpsAddr, &tls.Config{ServerName: name, RootCAs: r.roots})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// waitLeaf is leaf once the edge serves name, within the time given.
func (r *edgeRig) waitLeaf(t *testing.T, name string, within time.Duration) *x509.Certificate {
	t.Helper()
	var got *x509.Certificate
	poll.Until(t, within, name+" served with a certificate from pebble", func() error {
		var err error
		got, err = r.leaf(name)
		return err
	})
	return got
}

// edgePage is a backend that answers every request with body, until the test
// ends.
func edgePage(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// edgeLoad is a client that requests a public name through the edge
// every 100 ms, each request on a connection of its own (so each sees the
// certificate served at that moment), its chain verified to Pebble's
// root, until end.
type edgeLoad struct {
	mu     sync.Mutex
	served []servedAt // every request answered as it should be, in order
	failed []string   // every other, what went wrong
	stop   chan struct{}
	done   chan struct{}
}

// servedAt is a request answered: when it started, the certificate's
// serial.
type servedAt struct {
	at     time.Time
	serial string
}

// load starts requesting name, wanting body.
func (r *edgeRig) load(name, body string) *edgeLoad {
	l := &edgeLoad{stop: make(chan struct{}), done: make(chan struct{})}
	d := &net.Dialer{Timeout: 5 * time.Second}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, r.httpsAddr)
		},
		TLSClientConfig:   &tls.Config{RootCAs: r.roots},
		DisableKeepAlives: true,
	}}
	url := fmt.Sprintf("https://%s:%d/", name, r.httpsPort)
	go func() {
		defer close(l.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			at := time.Now()
			serial, err := edgeGet(client, url, body)
			l.mu.Lock()
			if err != nil {
				l.failed = append(l.failed, fmt.Sprintf("%s: %v", at.Format("15:04:05.000"), err))
			} else {
				l.served = append(l.served, servedAt{at: at, serial: serial})
			}
			l.mu.Unlock()
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return l
}

// edgeGet is the serial of the certificate url was served with, when it
// answered 200 with body.
func edgeGet(c *http.Client, url, body string) (string, error) {
	res, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return "", err
	}
	if res.StatusCode != http.StatusOK || string(b) != body {
		return "", fmt.Errorf("%s: %q", res.Status, b)
	}
	return res.TLS.PeerCertificates[0].SerialNumber.String(), nil
}

// state is what the load saw so far.
func (l *edgeLoad) state() ([]servedAt, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]servedAt(nil), l.served...), append([]string(nil), l.failed...)
}

// end stops the load and waits for its last request.
func (l *edgeLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// servedSince are the requests of served started at or after t.
func servedSince(served []servedAt, t time.Time) []servedAt {
	for i, s := range served {
		if !s.at.Before(t) {
			return served[i:]
		}
	}
	return nil
}

// logSince is the rig's log written after mark (a length of it).
func (r *edgeRig) logSince(mark int) string { return r.logs.String()[mark:] }

// renewalFailed says whether log holds a failed renewal of name.
func renewalFailed(log, name string) bool {
	for line := range strings.Lines(log) {
		if strings.Contains(line, `msg="certificate not obtained`) && strings.Contains(line, "name="+name+" ") && strings.Contains(line, "renewal=true") {
			return true
		}
	}
	return false
}

// servesAsKept holds that an edge made again serves each of backends with
// the serial first gives it, a page of name (body) through it, and no new
// order or certificate at the CA since orders and issued were counted;
// when says how the edge was made again.
func (r *edgeRig) servesAsKept(t *testing.T, backends, first map[string]string, name, body, when string, orders, issued int) {
	t.Helper()
	restarted := time.Now()
	for n := range backends {
		if got := r.waitLeaf(t, n, 5*time.Second).SerialNumber.String(); got != first[n] {
			t.Errorf("%s served with serial %s %s, want the kept %s", n, got, when, first[n])
		}
	}
	t.Logf("both names served again %s %s", time.Since(restarted).Round(time.Millisecond), when)
	load := r.load(name, body)
	poll.Until(t, 10*time.Second, "a page through the edge made again "+when, func() error {
		served, failed := load.state()
		if len(served) > 0 {
			return nil
		}
		return errors.New(strings.Join(failed, "; "))
	})
	load.end()
	if n, m := r.pb.Orders(t), r.pb.Issued(t); n != orders || m != issued {
		t.Errorf("pebble took %d orders and issued %d certificates %s, want %d and %d as before", n, m, when, orders, issued)
	}
}
