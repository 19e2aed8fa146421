package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/dockertest"
	"github.com/mesh-fleet/mesh/internal/poll"
)

// countingEngine is a socket in front of the machine's engine that passes
// every request on and counts them by path (less the API version).
type countingEngine struct {
	mu    sync.Mutex
	paths map[string]int
}

func (c *countingEngine) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paths[path]
}

func newCountingEngine(t *testing.T) (*countingEngine, string) {
	t.Helper()
	real := dockertest.Client(t).DaemonHost()
	u, err := url.Parse(real)
	if err != nil || u.Scheme != "unix" {
		t.Fatalf("the engine at %q is not on a unix socket", real)
	}
	ce := &countingEngine{paths: map[string]int{}}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker" },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", u.Path)
		}},
	}
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if strings.HasPrefix(p, "/v1.") {
			p = p[strings.Index(p[1:], "/")+1:]
		}
		ce.mu.Lock()
		ce.paths[p]++
		ce.mu.Unlock()
		proxy.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return ce, "unix://" + sock
}

// TestEngineWatchedByPing: the engine is checked at the heartbeat's pace
// through its health endpoint, never by a version query, which makes
// dockerd run runc and docker-init (two processes a heartbeat, per host).
func TestEngineWatchedByPing(t *testing.T) {
	t.Parallel()
	engine, endpoint := newCountingEngine(t)
	d, err := NewDocker(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	w := &engineWatch{docker: d, every: 20 * time.Millisecond, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.up.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.watch(ctx, make(chan struct{}, 1)) }()
	poll.Until(t, 10*time.Second, "five checks of the engine", func() error {
		n := engine.count("/_ping")
		if n >= 5 {
			return nil
		}
		return errors.New(strings.Repeat("ping ", n))
	})
	cancel()
	<-done
	if n := engine.count("/version"); n != 0 {
		t.Fatalf("the engine's watch asked its version %d times, want none (pinged %d times)", n, engine.count("/_ping"))
	}
}
