package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/miekg/dns"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"
)

// webPort is the web example's route port: meshtls serves the page over
// TLS there with the mesh certificate for web.NODE.internal.
const webPort = "8443"

// TestTLSRouteByName is the TLS route as a user meets it: the web example
// on alpha and the client on beta, pushed; web.alpha.internal looked up
// with a DNS packet at alpha's own resolver (never the machine's); curl
// with the mesh root (mesh ca roots) fetches the page from that address by
// name, and without it refuses the server (the machine's store does not
// hold the mesh root); the client container on beta fetches the page by
// name, verifying the server against the root its certificate resource
// keeps, and refuses a name the certificate does not carry. Leaves live a
// minute and alpha looks for renewals every second: the renewed
// certificate is served from the next connection, by the same container
// (the subtest "renewed", with MESH_TEST_SLOW=1: it waits 40 s for it).
func TestTLSRouteByName(t *testing.T) {
	t.Parallel()
	m := newContainerMesh(t, "--cert-lifetime", "1m", "--cert-renew-check", "1s")
	mustRun(t, "module", "register", "--dir", m.dir, m.webDir, m.clientModDir)
	mustRun(t, "assign", "--dir", m.dir, "web", m.a)
	web := "web." + m.a + ".internal"
	mustRun(t, "assign", "--dir", m.dir, "--set", "target="+web+":"+webPort, "client", m.b)
	push(t, m.dir)

	roots := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(roots, []byte(mustRun(t, "ca", "roots", "--dir", m.dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The name, from the mesh's resolver.
	r, err := ask(t, m.addrs.DNS, web, dns.TypeA)
	if err != nil || r.Rcode != dns.RcodeSuccess || answers(r) != m.addrA {
		t.Fatalf("alpha's resolver, %s: %v %v; want %s", web, r, err, m.addrA)
	}
	addr := answers(r)
	url := "https://" + web + ":" + webPort + "/"
	curl := func(t *testing.T, args ...string) (string, int) {
		t.Helper()
		args = append([]string{"-sS", "--noproxy", "*", "--max-time", "10", "--resolve", web + ":" + webPort + ":" + addr}, args...)
		out, err := exec.Command("curl", append(args, url)...).CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		} else if err != nil {
			t.Fatalf("curl: %v", err)
		}
		return string(out), 0
	}
	page := "Hello from " + m.a + "\n"
	poll.Until(t, 30*time.Second, "curl --cacert roots.pem "+url, func() error {
		out, code := curl(t, "--cacert", roots)
		if code == 0 && out == page {
			return nil
		}
		return fmt.Errorf("exit %d: %s", code, out)
	})
	served := servedSerial(t, addr, web, roots)
	if out, code := curl(t); code != 60 || !strings.Contains(out, "SSL certificate problem: unable to get local issuer certificate") {
		t.Errorf("curl %s without the mesh root: exit %d, %q; want exit 60, the issuer unknown", url, code, out)
	}

	// Inside beta's container, verification on.
	poll.Until(t, 30*time.Second, "beta's client fetched alpha's page over TLS by name", func() error {
		b, err := os.ReadFile(filepath.Join(m.rootB, "srv/client/page"))
		if err == nil && string(b) == page {
			return nil
		}
		return fmt.Errorf("%q %v", b, err)
	})
	// alpha.internal is alpha's address too, but web's certificate does not
	// name it: the client refuses the server and writes nothing. The page
	// is removed once the push replaced the client (the one it replaced
	// fetched every 2 s until then).
	mustRun(t, "assign", "--dir", m.dir, "--set", "target="+m.a+".internal:"+webPort, "client", m.b)
	push(t, m.dir)
	if err := os.Remove(filepath.Join(m.rootB, "srv/client/page")); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	want := "x509: certificate is valid for " + web + ", not " + m.a + ".internal"
	poll.Until(t, 30*time.Second, "beta's client refused a name the certificate does not carry", func() error {
		logs := containerLogs(t, m.cli, m.id(t, m.b, "client"))
		if strings.Contains(logs, want) {
			return nil
		}
		return errors.New(logs)
	})
	if _, err := os.Stat(filepath.Join(m.rootB, "srv/client/page")); !os.IsNotExist(err) {
		t.Errorf("the client wrote a page from a server it refused: %v", err)
	}

	// Renewed: served by the same container, with no restart.
	t.Run("renewed", func(t *testing.T) {
		optin.NeedSlow(t, "waits out a one-minute certificate's renewal")
		webID := m.id(t, m.a, "web")
		poll.Until(t, 2*time.Minute, "alpha serves its renewed certificate", func() error {
			now := servedSerial(t, addr, web, roots)
			if now != served {
				return nil
			}
			return errors.New("still serial " + now)
		})
		if m.id(t, m.a, "web") != webID {
			t.Error("the renewal replaced alpha's web container")
		}
		if out, code := curl(t, "--cacert", roots); code != 0 || out != page {
			t.Errorf("curl --cacert roots.pem %s after the renewal: exit %d, %q", url, code, out)
		}
	})
}

// servedSerial is the serial of the leaf the server at addr presents for
// name, verified against the roots in the PEM file roots.
func servedSerial(t *testing.T, addr, name, roots string) string {
	t.Helper()
	b, err := os.ReadFile(roots)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", net.JoinHostPort(addr, webPort), &tls.Config{RootCAs: pool, ServerName: name})
	if err != nil {
		t.Fatalf("TLS to %s at %s, verified against %s: %v", name, addr, roots, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

// containerLogs is what the container id wrote so far, stdout and stderr.
func containerLogs(t *testing.T, cli *client.Client, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logs, err := cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatalf("logs of %s: %v", id, err)
	}
	defer logs.Close()
	var out bytes.Buffer
	// Without a TTY the engine multiplexes stdout and stderr.
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		t.Fatalf("logs of %s: %v", id, err)
	}
	return out.String()
}
