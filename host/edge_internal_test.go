package host

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/spec"
)

// edgeRoster is a roster in which node alpha serves each of backends
// (public name to backend URL) as route NAME's first label, on port the
// backend's.
//
// Each test's public names are its own: certmagic keeps the challenges
// being solved by name, for the whole process, and the edge tests run in
// parallel, so two tests solving one name would answer each other's
// challenges.
func edgeRoster(t *testing.T, backends map[string]string) spec.Roster {
	t.Helper()
	var r spec.Roster
	for name, u := range backends {
		secure := strings.HasPrefix(u, "https://")
		host, port, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(u, "https://"), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		route := strings.Split(name, ".")[0]
		r.Routes = append(r.Routes,
			spec.RosterRoute{Name: spec.RouteName(route, "alpha"), Node: "alpha", Address: host, Port: p, Module: route, TLS: secure},
			spec.RosterRoute{Name: name, Node: "alpha", Address: host, Port: p, Module: route, Public: true, TLS: secure})
	}
	r.Sort()
	return r
}

// curl runs curl verifying against root with every name at 127.0.0.1:
// its output (-w's format after the body), and its error.
func curl(root string, port int, name, url string, args ...string) (string, error) {
	all := append([]string{"-sS", "--max-time", "10", "--cacert", root, "--resolve", fmt.Sprintf("%s:%d:127.0.0.1", name, port)}, args...)
	out, err := exec.Command("curl", append(all, url)...).CombinedOutput()
	return string(out), err
}

// TestEdgeServesPublicNamesWithACME: an edge configured against Pebble
// obtains a certificate for each public name of the roster, which curl
// verifies to Pebble's root, and forwards to the route's backend (over TLS
// verified against the mesh's root when the route says tls); plain
// HTTP redirects to HTTPS; a name added to the roster gets its certificate
// without a restart; a backend stopped gives a 502 naming the route; a
// name the roster does not hold fails the handshake; the edge's keys are
// kept 0600; removing the resource closes the listeners.
func TestEdgeServesPublicNamesWithACME(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed: install it (.ci/run does); the test verifies the edge's chains with it")
	}
	httpAddr, httpsAddr := testport.Addr(t, "127.0.0.1"), testport.Addr(t, "127.0.0.1")
	httpPort, httpsPort := pebbletest.Port(t, httpAddr), pebbletest.Port(t, httpsAddr)
	pb := pebbletest.Start(t, httpPort, httpsPort)

	page := func(s string) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s for %s via %s %s %s\n", s, hostOnly(r.Host), r.Header.Get("X-Forwarded-Proto"), hostOnly(r.Header.Get("X-Forwarded-Host")),
				map[bool]string{true: "forwarded-for", false: "no-forwarded-for"}[r.Header.Get("X-Forwarded-For") != ""])
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	one, two, three := page("one"), page("two"), page("three")
	// A route that says tls serves a mesh certificate for its internal
	// name, which the edge verifies against the mesh's root.
	auth, err := ca.Create(t.TempDir(), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := auth.IssueServer([]string{spec.RouteName("secure", "alpha")}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	secure := httptest.NewUnstartedServer(page("secure").Config.Handler)
	secure.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	secure.StartTLS()
	t.Cleanup(secure.Close)
	backends := map[string]string{"one.example.test": one.URL, "two.example.test": two.URL, "secure.example.test": secure.URL}

	dir := filepath.Join(t.TempDir(), EdgeDir)
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the edge's log:\n%s", logs.String())
		}
	})
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	g := newEdge(dir, string(auth.RootsPEM()), log)
	t.Cleanup(g.stop)
	g.take(edgeRoster(t, backends))
	e := &spec.EdgeSpec{Name: "edge", HTTP: httpAddr, HTTPS: httpsAddr, ACMECA: pb.Directory, Email: "ops@example.org", ACMERoots: pb.TLSRoots}
	r := spec.Resource{Name: "edge:edge:edge", Kind: spec.KindEdge, Module: "edge", Spec: e}
	a := edgeApplier{edge: g}
	start := time.Now()
	if res, err := a.Apply(context.Background(), r, nil); err != nil || res.Outcome != spec.Created {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	if res, err := a.Plan(context.Background(), r); err != nil || res.Outcome != spec.Unchanged {
		t.Fatalf("plan once applied: %+v, %v", res, err)
	}
	serves := func(name, want string) {
		t.Helper()
		url := fmt.Sprintf("https://%s:%d/page", name, httpsPort)
		poll.Until(t, 60*time.Second, name+" served over HTTPS", func() error {
			out, err := curl(pb.Root, httpsPort, name, url)
			if err == nil && strings.Contains(out, want) {
				return nil
			}
			return fmt.Errorf("%s (%v)", out, err)
		})
	}
	serves("one.example.test", "one for one.example.test via https one.example.test forwarded-for")
	serves("two.example.test", "two for two.example.test")
	serves("secure.example.test", "secure for secure.example.test via https")
	t.Logf("three names obtained and served %s after the edge was configured", time.Since(start).Round(time.Millisecond))

	out, err := curl(pb.Root, httpPort, "one.example.test", fmt.Sprintf("http://one.example.test:%d/a?b=c", httpPort), "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}")
	if want := fmt.Sprintf("308 https://one.example.test:%d/a?b=c", httpsPort); err != nil || out != want {
		t.Errorf("plain HTTP: %q (%v), want %q", out, err, want)
	}

	backends["three.example.test"] = three.URL
	added := time.Now()
	g.take(edgeRoster(t, backends))
	serves("three.example.test", "three for three.example.test")
	t.Logf("a name added to the roster served over HTTPS %s later", time.Since(added).Round(time.Millisecond))

	if n := pb.Orders(t); n != len(backends) {
		t.Errorf("pebble took %d orders for %d public names, want one each", n, len(backends))
	}

	two.Close()
	out, err = curl(pb.Root, httpsPort, "two.example.test", fmt.Sprintf("https://two.example.test:%d/", httpsPort), "-w", " %{http_code}")
	if err != nil || !strings.Contains(out, "two.alpha.internal") || !strings.HasSuffix(out, " 502") {
		t.Errorf("a backend stopped: %q (%v), want a 502 naming two.alpha.internal", out, err)
	}

	out, err = curl(pb.Root, httpsPort, "four.example.test", fmt.Sprintf("https://four.example.test:%d/", httpsPort))
	if err == nil || strings.Contains(out, "four") && !strings.Contains(out, "curl:") {
		t.Errorf("a name not in the roster: %q (%v), want the handshake to fail", out, err)
	}

	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		info, _ := d.Info()
		switch {
		case d.IsDir() && info.Mode().Perm() != 0o700:
			t.Errorf("%s is %v, want 0700", p, info.Mode().Perm())
		case strings.HasSuffix(p, ".key") && info.Mode().Perm() != 0o600:
			t.Errorf("%s is %v, want 0600", p, info.Mode().Perm())
		}
		return nil
	})

	if _, err := a.Remove(context.Background(), Applied{Name: r.Name, Kind: spec.KindEdge, Path: "edge"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", httpsAddr, time.Second); err == nil {
		c.Close()
		t.Error("the https listener still answers once the edge is removed")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the edge's storage: %v", err)
	}
}

// lockedBuffer is a buffer written from any goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
