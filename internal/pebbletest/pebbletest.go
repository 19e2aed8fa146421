// Package pebbletest is test support: Let's Encrypt's Pebble, a real ACME
// server, with pebble-challtestsrv as the DNS it asks, which resolves every
// name to 127.0.0.1 (or the address ResolveTo gives). Both are built from
// the module's tools once per run and started on loopback ports a test
// holds, in the test's network namespace or the one Netns names.
package pebbletest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"golang.org/x/sys/unix"
)

// The tools, as go.mod names them.
const (
	pebblePkg = "github.com/letsencrypt/pebble/v2/cmd/pebble"
	dnsPkg    = "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv"
)

// Pebble is a running Pebble.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// TLSRoots is the path of the PEM root Pebble's own TLS is verified
	// against (its module's test minica).
	TLSRoots string
	// Root is the path of the PEM root of the certificates Pebble issues.
	Root string

	log  string // Pebble's output
	stop func() // kills Pebble, once
}

// Option changes how Start runs Pebble.
type Option func(*options)

type options struct {
	validity time.Duration
	netns    string // the network namespace's path; "": the test's own
	resolve  string // the address every name resolves to
}

// Validity is how long the certificates Pebble issues are valid (90 days
// unless given): short, they are renewed while a test watches.
func Validity(d time.Duration) Option { return func(o *options) { o.validity = d } }

// Netns runs Pebble and its DNS in the network namespace bound at path
// (as ip netns add binds one, under /run/netns), on that namespace's
// loopback: a client in the namespace reaches Pebble at Directory, and
// Pebble validates on the namespace's addresses. Start reaches Pebble
// there too.
func Netns(path string) Option { return func(o *options) { o.netns = path } }

// ResolveTo has Pebble's DNS resolve every name to ip (127.0.0.1 unless
// given): Pebble validates at ip, an edge's public address.
func ResolveTo(ip string) Option { return func(o *options) { o.resolve = ip } }

// built are the tools' binaries, built once per run.
var built struct {
	once sync.Once
	dir  string // the pebble module's directory: its test certificates
	bins map[string]string
	err  error
}

// build builds both tools with go build, from the module that names them,
// into a directory kept between runs (go build links again only what
// changed).
func build() (map[string]string, string, error) {
	built.once.Do(func() {
		kept := filepath.Join(os.TempDir(), fmt.Sprintf("mesh-pebbletest-%d", os.Getuid()))
		if built.err = os.MkdirAll(kept, 0o700); built.err != nil {
			return
		}
		built.bins = map[string]string{}
		for _, pkg := range []string{pebblePkg, dnsPkg} {
			out := filepath.Join(kept, filepath.Base(pkg))
			cmd := exec.Command("go", "build", "-o", out, pkg)
			if b, err := cmd.CombinedOutput(); err != nil {
				built.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
				return
			}
			built.bins[pkg] = out
		}
		b, err := exec.Command("go", "list", "-f", "{{.Module.Dir}}", pebblePkg).Output()
		if err != nil {
			built.err = fmt.Errorf("find pebble's module: %w", err)
			return
		}
		built.dir = strings.TrimSpace(string(b))
	})
	return built.bins, built.dir, built.err
}

// Start runs Pebble and its DNS until the test ends. Pebble validates
// HTTP-01 on httpPort and TLS-ALPN-01 on tlsPort of 127.0.0.1, where every
// name resolves.
func Start(t testing.TB, httpPort, tlsPort int, opts ...Option) *Pebble {
	t.Helper()
	o := options{validity: 90 * 24 * time.Hour, resolve: "127.0.0.1"}
	for _, opt := range opts {
		opt(&o)
	}
	bins, mod, err := build()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	dns := testport.Addr(t, "127.0.0.1")
	run(t, dir, "challtestsrv", o.netns, bins[dnsPkg], nil, "-dnsserver", dns, "-management", testport.Addr(t, "127.0.0.1"),
		"-http01", "", "-https01", "", "-tlsalpn01", "", "-doh", "", "-defaultIPv4", o.resolve, "-defaultIPv6", "")
	listen, manage := testport.Addr(t, "127.0.0.1"), testport.Addr(t, "127.0.0.1")
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress": listen, "managementListenAddress": manage,
		"certificate": filepath.Join(mod, "test/certs/localhost/cert.pem"), "privateKey": filepath.Join(mod, "test/certs/localhost/key.pem"),
		"httpPort": httpPort, "tlsPort": tlsPort, "ocspResponderURL": "", "externalAccountBindingRequired": false,
		"retryAfter": map[string]int{"authz": 1, "order": 1},
		"profiles":   map[string]any{"default": map[string]any{"description": "the test's", "validityPeriod": int(o.validity.Seconds())}},
	}}
	body, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgPath, body, 0o600); err != nil {
		t.Fatal(err)
	}
	stop := run(t, dir, "pebble", o.netns, bins[pebblePkg], []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0"},
		"-config", cfgPath, "-dnsserver", dns)
	p := &Pebble{Directory: "https://" + listen + "/dir", TLSRoots: filepath.Join(mod, "test/certs/pebble.minica.pem"), Root: filepath.Join(dir, "root.pem"), log: filepath.Join(dir, "pebble.log"), stop: stop}
	client, err := p.client(o.netns)
	if err != nil {
		t.Fatal(err)
	}
	var root []byte
	poll.Until(t, 30*time.Second, "pebble answers", func() error {
		if _, err := get(client, p.Directory); err != nil {
			return err
		}
		root, err = get(client, "https://"+manage+"/roots/0")
		return err
	})
	if err := os.WriteFile(p.Root, root, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Stop kills Pebble before the test ends (its DNS goes on answering):
// the ACME CA is gone, as for a client whose CA is down. Orders and Issued
// still count what it did.
func (p *Pebble) Stop() { p.stop() }

// Orders is how many orders Pebble has taken: each new order is a line
// of its log.
func (p *Pebble) Orders(t testing.TB) int {
	t.Helper()
	return p.count(t, "Added order ")
}

// Issued is how many certificates Pebble has issued.
func (p *Pebble) Issued(t testing.TB) int {
	t.Helper()
	return p.count(t, "Issued certificate serial ")
}

// count is how many lines of Pebble's log hold s.
func (p *Pebble) count(t testing.TB, s string) int {
	t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatalf("read pebble's log: %v", err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// client verifies Pebble's TLS against its test root, and dials in the
// network namespace at netns unless it is "".
func (p *Pebble) client(netns string) (*http.Client, error) {
	pemBytes, err := os.ReadFile(p.TLSRoots)
	if err != nil {
		return nil, fmt.Errorf("read pebble's test root: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	if netns != "" {
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialIn(ctx, netns, network, addr)
		}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}, nil
}

// dialIn dials addr from the network namespace at netns: on a thread that
// enters it and is left locked, so that it ends with the goroutine rather
// than serving another in the wrong namespace. The connection keeps the
// namespace it was made in.
func dialIn(ctx context.Context, netns, network, addr string) (net.Conn, error) {
	type dialled struct {
		c   net.Conn
		err error
	}
	ch := make(chan dialled, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(netns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- dialled{err: fmt.Errorf("open network namespace %s: %w", netns, err)}
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- dialled{err: fmt.Errorf("enter network namespace %s: %w", netns, err)}
			return
		}
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		ch <- dialled{c, err}
	}()
	d := <-ch
	return d.c, d.err
}

// get is the body at url, which must answer 200.
func get(c *http.Client, url string) ([]byte, error) {
	res, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, res.Status)
	}
	return b, nil
}

// run starts bin with args until the test ends or stop is called, in the
// network namespace at netns unless it is "" (nsenter, which execs bin),
// its output in dir/name.log (logged when the test failed).
func run(t testing.TB, dir, name, netns, bin string, env []string, args ...string) (stop func()) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	if netns != "" {
		cmd = exec.Command("nsenter", append([]string{"--net=" + netns, "--", bin}, args...)...)
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
			out.Close()
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s's output:\n%s", name, b)
		}
	})
	return stop
}

// Port is the port of a host:port.
func Port(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
