package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
)

// TestEdgeServesAPublicNameThroughTheHost: the edge example assigned to a
// node of a real mesh (the genesis machine's host, the binary) makes that
// host obtain a certificate from an ACME CA (Pebble, validating for real)
// for a route's public name as soon as the roster carries it, and serve
// it: curl verifies the chain to Pebble's root and gets the page of the
// route's backend; plain HTTP redirects to HTTPS; the backend stopped
// gives a 502 naming the route.
func TestEdgeServesAPublicNameThroughTheHost(t *testing.T) {
	t.Parallel()
	httpAddr, httpsAddr := port(t), port(t)
	httpPort, httpsPort := pebbletest.Port(t, httpAddr), pebbletest.Port(t, httpsAddr)
	pb := pebbletest.Start(t, httpPort, httpsPort)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "the site, for %s via %s\n", r.Host, r.Header.Get("X-Forwarded-Proto"))
	})}
	go backend.Serve(ln)
	t.Cleanup(func() { backend.Close() })
	backendPort := ln.Addr().(*net.TCPAddr).Port

	m := newMesh(t)
	mustRun(t, "module", "register", "--dir", m.dir, siteModule(t, backendPort), example("edge"))
	mustRun(t, "assign", "--dir", m.dir, "site", "alpha")
	mustRun(t, "assign", "--dir", m.dir, "--set", "http="+httpAddr, "--set", "https="+httpsAddr,
		"--set", "acme_ca="+pb.Directory, "--set", "acme_roots="+pb.TLSRoots, "--set", "email=ops@example.org", "edge", "alpha")
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("push: exit %d %+v", code, o)
	}

	curl := func(args ...string) (string, error) {
		out, err := exec.Command("curl", append([]string{"-sS", "--max-time", "5", "--cacert", pb.Root,
			"--resolve", "www.example.test:" + strconv.Itoa(httpsPort) + ":127.0.0.1",
			"--resolve", "www.example.test:" + strconv.Itoa(httpPort) + ":127.0.0.1"}, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	page := fmt.Sprintf("https://www.example.test:%d/", httpsPort)
	poll.Until(t, 60*time.Second, "www.example.test served over HTTPS, its chain verified", func() error {
		out, err := curl(page)
		if err != nil || out != fmt.Sprintf("the site, for www.example.test:%d via https", httpsPort) {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	out, err := curl("-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", fmt.Sprintf("http://www.example.test:%d/x", httpPort))
	if want := fmt.Sprintf("308 https://www.example.test:%d/x", httpsPort); err != nil || out != want {
		t.Errorf("plain HTTP: %q (%v), want %q", out, err, want)
	}
	backend.Close()
	poll.Until(t, 20*time.Second, "a 502 naming the route once the backend is down", func() error {
		out, err := curl("-w", " %{http_code}", page)
		if err != nil || !strings.HasSuffix(out, " 502") || !strings.Contains(out, "site.alpha.internal") {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// siteModule is the directory of module site: a service run by hand on
// its node, on port, public as www.example.test.
func siteModule(t *testing.T, port int) string {
	t.Helper()
	site := filepath.Join(t.TempDir(), "site")
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := fmt.Sprintf(`{"name": "site", "version": "1.0.0",
  "description": "a service run by hand on its node, served to the world by the edge",
  "routes": [{"name": "site", "port": %d, "public": ["www.example.test"]}], "resources": []}`, port)
	if err := os.WriteFile(filepath.Join(site, "module.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return site
}

// TestEdgeHostRestartedServesItsKeptCertificates: a joined host assigned
// the edge, once it serves a public name, is stopped and started again
// with nothing but --dir: it serves the name again with the certificate
// it kept in its state directory (the same serial, the page of the
// backend on another node), and the ACME CA, still up, takes no new
// order.
func TestEdgeHostRestartedServesItsKeptCertificates(t *testing.T) {
	t.Parallel()
	edgeHostRestarted(t, false)
}

// TestEdgeHostRestartedWithTheControllerDown: as
// TestEdgeHostRestartedServesItsKeptCertificates, with the controller
// (and the bus with the edges' bucket) stopped before the edge's host
// starts again: it serves the name from its own copy all the same.
func TestEdgeHostRestartedWithTheControllerDown(t *testing.T) {
	t.Parallel()
	edgeHostRestarted(t, true)
}

// edgeHostRestarted is the restart of an edge's host, the controller
// stopped first when controllerDown says so.
func edgeHostRestarted(t *testing.T, controllerDown bool) {
	httpAddr, httpsAddr := port(t), port(t)
	httpsPort := pebbletest.Port(t, httpsAddr)
	pb := pebbletest.Start(t, pebbletest.Port(t, httpAddr), httpsPort)
	roots := x509.NewCertPool()
	if b, err := os.ReadFile(pb.Root); err != nil || !roots.AppendCertsFromPEM(b) {
		t.Fatalf("pebble's root: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "the site")
	})}
	go backend.Serve(ln)
	t.Cleanup(func() { backend.Close() })

	m := newMesh(t)
	betaDir, beta := m.join(t, "beta")
	mustRun(t, "module", "register", "--dir", m.dir, siteModule(t, ln.Addr().(*net.TCPAddr).Port), example("edge"))
	mustRun(t, "assign", "--dir", m.dir, "site", "alpha")
	mustRun(t, "assign", "--dir", m.dir, "--set", "http="+httpAddr, "--set", "https="+httpsAddr,
		"--set", "acme_ca="+pb.Directory, "--set", "acme_roots="+pb.TLSRoots, "--set", "email=ops@example.org", "edge", "beta")
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("push: exit %d %+v", code, o)
	}

	// served is the serial of the certificate the edge serves
	// www.example.test with, its chain verified to Pebble's root, once a
	// request on it gets the site's page.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, httpsAddr)
		},
		TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true,
	}}
	page := fmt.Sprintf("https://www.example.test:%d/", httpsPort)
	served := func(within time.Duration, what string) string {
		t.Helper()
		var serial string
		poll.Until(t, within, what, func() error {
			beta.alive(t)
			res, err := client.Get(page)
			if err != nil {
				return err
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusOK || string(body) != "the site" {
				return fmt.Errorf("%s: %q", res.Status, body)
			}
			serial = res.TLS.PeerCertificates[0].SerialNumber.String()
			return nil
		})
		return serial
	}
	first := served(60*time.Second, "www.example.test served by beta's edge")
	orders, issued := pb.Orders(t), pb.Issued(t)
	if orders != 1 || issued != 1 {
		t.Fatalf("pebble took %d orders and issued %d certificates for one name, want one each", orders, issued)
	}

	beta.stop(t)
	if _, err := client.Get(page); err == nil {
		t.Fatal("the edge still answers with its host stopped")
	}
	if controllerDown {
		m.d.stop(t)
	}
	restarted := time.Now()
	beta = start(t, "host", "--dir", betaDir)
	if got := served(30*time.Second, "www.example.test served by beta's edge after its restart"); got != first {
		t.Errorf("served with serial %s after the restart, want the kept %s", got, first)
	}
	t.Logf("served again %s after the host started again", time.Since(restarted).Round(time.Millisecond))
	if n, m := pb.Orders(t), pb.Issued(t); n != orders || m != issued {
		t.Errorf("pebble took %d orders and issued %d certificates by the restart's end, want %d and %d as before it", n, m, orders, issued)
	}
}
