package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const webName = "web.test.internal"

// startServe runs serve on a loopback port until the test ends, and is its
// address and its log.
func startServe(t *testing.T, dir, root string) (string, *syncBuffer) {
	t.Helper()
	addr, logs, _ := startCountedServe(t, dir, root)
	return addr, logs
}

// countingListener counts the connections it accepted.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// startCountedServe is startServe that counts the connections served.
func startCountedServe(t *testing.T, dir, root string) (string, *syncBuffer, *atomic.Int32) {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: inner}
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, dir, root, slog.New(slog.NewTextHandler(logs, nil))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v when stopped, want nil", err)
		}
		if t.Failed() {
			t.Logf("serve's log:\n%s", logs)
		}
	})
	return ln.Addr().String(), logs, &ln.n
}

// serial is the serial (hex) of the leaf the server at addr presents for
// name, verified against rootPEM.
func serial(addr, name string, rootPEM []byte) (string, error) {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: name})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

func webRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "index.html"), []byte("Hello from test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestServeReadsARenewedPair: the pair a certificate resource swaps in (its
// ..data link renamed over, or, in a directory without one, the files
// renamed over) is served from the next handshake on, without a restart; a
// pair that does not match keeps the one before in use, and says so once.
func TestServeReadsARenewedPair(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	later := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name string
		put  func(t *testing.T, dir, version string, cert, key []byte)
	}{
		{"..data link swapped", func(t *testing.T, dir, version string, cert, key []byte) {
			keep(t, dir, version, cert, key, ca.rootPEM)
		}},
		{"files renamed over", func(t *testing.T, dir, _ string, cert, key []byte) {
			for name, b := range map[string][]byte{certFile: cert, keyFile: key} {
				tmp := filepath.Join(dir, "."+name+".tmp")
				if err := os.WriteFile(tmp, b, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cert1, key1 := ca.leaf(t, 0x51, later, webName)
			tc.put(t, dir, "v1", cert1, key1)
			addr, logs := startServe(t, dir, webRoot(t))
			for range 2 {
				if got, err := serial(addr, webName, ca.rootPEM); err != nil || got != "51" {
					t.Fatalf("first pair: serial %q, %v; want 51", got, err)
				}
			}

			cert2, key2 := ca.leaf(t, 0x52, later, webName)
			tc.put(t, dir, "v2", cert2, key2)
			if got, err := serial(addr, webName, ca.rootPEM); err != nil || got != "52" {
				t.Fatalf("after the renewal: serial %q, %v; want 52 without a restart", got, err)
			}

			// The key of another leaf: not a pair. The one before serves.
			_, otherKey := ca.leaf(t, 0x53, later, webName)
			cert4, _ := ca.leaf(t, 0x54, later, webName)
			tc.put(t, dir, "v3", cert4, otherKey)
			for range 2 {
				if got, err := serial(addr, webName, ca.rootPEM); err != nil || got != "52" {
					t.Fatalf("after a broken pair: serial %q, %v; want 52 still", got, err)
				}
			}
			if n := strings.Count(logs.String(), "certificate not read; serving the one read before"); n != 1 {
				t.Errorf("the broken pair was logged %d times, want once:\n%s", n, logs)
			}
			if !strings.Contains(logs.String(), "private key does not match public key") {
				t.Errorf("the log does not say why the pair was not read:\n%s", logs)
			}

			cert5, key5 := ca.leaf(t, 0x55, later, webName)
			tc.put(t, dir, "v4", cert5, key5)
			if got, err := serial(addr, webName, ca.rootPEM); err != nil || got != "55" {
				t.Fatalf("after the pair was mended: serial %q, %v; want 55", got, err)
			}
		})
	}
}

// TestServeWaitsForTheCertificate: serve starts before its certificate is
// there (a container may start before the certificate resource obtained
// it): handshakes fail, saying why, until the pair arrives, then succeed.
func TestServeWaitsForTheCertificate(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	dir := t.TempDir()
	addr, logs := startServe(t, dir, webRoot(t))
	if _, err := serial(addr, webName, ca.rootPEM); err == nil {
		t.Fatal("a handshake succeeded with no certificate in the directory")
	}
	if !strings.Contains(logs.String(), "no certificate to serve yet") || !strings.Contains(logs.String(), "no such file or directory") {
		t.Errorf("the log does not say the certificate is not there yet:\n%s", logs)
	}
	cert, key := ca.leaf(t, 0x61, time.Now().Add(time.Hour), webName)
	keep(t, dir, "v1", cert, key, ca.rootPEM)
	if got, err := serial(addr, webName, ca.rootPEM); err != nil || got != "61" {
		t.Fatalf("once the certificate is there: serial %q, %v; want 61", got, err)
	}
}

// TestCurlVerifiesServe: curl with the root (--cacert) fetches the page by
// name; without it, curl refuses the server (exit 60), as any client that
// does not hold the mesh root does.
func TestCurlVerifiesServe(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	dir := t.TempDir()
	cert, key := ca.leaf(t, 0x71, time.Now().Add(time.Hour), webName)
	keep(t, dir, "v1", cert, key, ca.rootPEM)
	addr, _ := startServe(t, dir, webRoot(t))
	_, port, _ := net.SplitHostPort(addr)
	url := "https://" + webName + ":" + port + "/"
	curl := func(args ...string) (string, int) {
		args = append([]string{"-sS", "--noproxy", "*", "--max-time", "10", "--resolve", webName + ":" + port + ":127.0.0.1"}, args...)
		out, err := exec.Command("curl", append(args, url)...).CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		} else if err != nil {
			t.Fatalf("curl: %v", err)
		}
		return string(out), 0
	}
	if out, code := curl("--cacert", filepath.Join(dir, caFile)); code != 0 || out != "Hello from test\n" {
		t.Errorf("curl --cacert ca.pem %s: exit %d, %q; want the page", url, code, out)
	}
	if out, code := curl(); code != 60 || !strings.Contains(out, "SSL certificate problem") {
		t.Errorf("curl %s without the root: exit %d, %q; want exit 60, the certificate refused", url, code, out)
	}
}
