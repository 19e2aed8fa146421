package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
)

// The name the fetch tests reach their servers by: the machine's own
// (/etc/hosts), so that the server's name is checked without a resolver.
const localName = "localhost"

// serveLeaf serves root with a leaf of c's for names until the test ends,
// and is the server's port.
func serveLeaf(t *testing.T, root string, c *testCA, serial int64, notAfter time.Time, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	cert, key := c.leaf(t, serial, notAfter, names...)
	keep(t, dir, "v1", cert, key, c.rootPEM)
	addr, _ := startServe(t, dir, root)
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// TestFetch: fetch writes the page when the server's certificate chains to
// the roots given and names the host asked; any other server, answer or
// roots file fails with why, exit 1, and leaves -out as it was.
func TestFetch(t *testing.T) {
	t.Parallel()
	ca, other := newTestCA(t), newTestCA(t)
	later := time.Now().Add(time.Hour)
	root := webRoot(t)
	good := serveLeaf(t, root, ca, 1, later, localName)
	foreign := serveLeaf(t, root, other, 2, later, localName)
	misnamed := serveLeaf(t, root, ca, 3, later, "web.other.internal")
	expired := serveLeaf(t, root, ca, 4, time.Now().Add(-time.Minute), localName)

	caDir := t.TempDir()
	rootsFile, notPEM := filepath.Join(caDir, "ca.pem"), filepath.Join(caDir, "not.pem")
	os.WriteFile(rootsFile, ca.rootPEM, 0o644)
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644)
	url := func(port, path string) string { return "https://" + localName + ":" + port + path }

	for _, tc := range []struct {
		name  string
		args  []string
		url   string
		want  string // the page written, or a part of the error
		code  int
		where string // "out" or "stdout" for the page
	}{
		{"verified", nil, url(good, "/"), "Hello from test\n", 0, "out"},
		{"verified, to standard output", []string{"-out", "-"}, url(good, "/index.html"), "Hello from test\n", 0, "stdout"},
		{"another CA's server", nil, url(foreign, "/"), "the server's certificate does not chain to a root in " + rootsFile, 1, ""},
		{"a certificate for another name", nil, url(misnamed, "/"), "the server's certificate is not for the name asked: tls: failed to verify certificate: x509: certificate is valid for web.other.internal, not localhost", 1, ""},
		{"an expired certificate", nil, url(expired, "/"), "the server's certificate is not valid: tls: failed to verify certificate: x509: certificate has expired", 1, ""},
		{"a page that is not there", nil, url(good, "/nope"), "the server answered 404 Not Found", 1, ""},
		{"a body over -max", []string{"-max", "5"}, url(good, "/"), "the body is over 5 bytes (-max); nothing was written", 1, ""},
		{"no roots file", []string{"-ca", filepath.Join(caDir, "absent.pem")}, url(good, "/"), "read the roots to verify against: open " + filepath.Join(caDir, "absent.pem") + ": no such file or directory", 1, ""},
		{"a roots file without a certificate", []string{"-ca", notPEM}, url(good, "/"), "-ca " + notPEM + " holds no PEM certificate", 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "page")
			os.WriteFile(out, []byte("old\n"), 0o644)
			args := append([]string{"fetch", "-ca", rootsFile, "-out", out}, tc.args...)
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append(args, tc.url), &stdout, &stderr)
			page, _ := os.ReadFile(out)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tc.code, stderr.String())
			}
			switch tc.where {
			case "out":
				if string(page) != tc.want || stderr.Len() != 0 {
					t.Errorf("-out holds %q, stderr %q; want %q and nothing said", page, stderr.String(), tc.want)
				}
			case "stdout":
				if stdout.String() != tc.want || string(page) != "old\n" {
					t.Errorf("stdout %q, -out %q; want %q on stdout", stdout.String(), page, tc.want)
				}
			default:
				if !strings.Contains(stderr.String(), tc.want) || !strings.HasPrefix(stderr.String(), "meshtls fetch: GET ") && !strings.HasPrefix(stderr.String(), "meshtls fetch: ") {
					t.Errorf("stderr %q, want it to say %q", stderr.String(), tc.want)
				}
				if string(page) != "old\n" {
					t.Errorf("a failed fetch left -out holding %q, want it as it was", page)
				}
			}
		})
	}
}

// TestFetchEvery: with -every, fetch waits for a roots file that is not
// there yet (a container may start before its certificate resource is
// obtained) and goes on through one that does not verify the server, then
// follows the page as it changes. Each failure is logged once however
// often it repeats, the success once after them, and a stop ends it with
// exit 0.
func TestFetchEvery(t *testing.T) {
	t.Parallel()
	ca, other := newTestCA(t), newTestCA(t)
	root := webRoot(t)
	dir := t.TempDir()
	cert, key := ca.leaf(t, 1, time.Now().Add(time.Hour), localName)
	keep(t, dir, "v1", cert, key, ca.rootPEM)
	addr, _, accepted := startCountedServe(t, dir, root)
	_, port, _ := net.SplitHostPort(addr)
	rootsFile, out := filepath.Join(t.TempDir(), "ca.pem"), filepath.Join(t.TempDir(), "page")

	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"fetch", "-every", "10ms", "-ca", rootsFile, "-out", out, "https://" + localName + ":" + port + "/"}, &bytes.Buffer{}, logs)
	}()
	poll.Until(t, 10*time.Second, "the missing roots logged", func() error {
		if strings.Contains(logs.String(), "no such file or directory") {
			return nil
		}
		return errors.New(logs.String())
	})
	// Each roots file is put in place whole: fetch, reading every 10 ms,
	// would otherwise read one empty between its truncation and its write
	// once in a while, and log that as a failure of its own.
	replace(t, rootsFile, other.rootPEM)
	poll.Until(t, 10*time.Second, "three rounds refused the server", func() error {
		if accepted.Load() >= 3 {
			return nil
		}
		return fmt.Errorf("%d connections", accepted.Load())
	})
	replace(t, rootsFile, ca.rootPEM)
	poll.Until(t, 10*time.Second, "the page fetched", func() error {
		b, _ := os.ReadFile(out)
		if string(b) == "Hello from test\n" {
			return nil
		}
		return errors.New(string(b) + " " + logs.String())
	})
	if err := os.WriteFile(filepath.Join(root, "index.html"), []byte("Howdy from test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the changed page fetched", func() error {
		b, _ := os.ReadFile(out)
		if string(b) == "Howdy from test\n" {
			return nil
		}
		return errors.New(string(b) + " " + logs.String())
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("stopped: exit %d, want 0", code)
	}
	failed := strings.Count(logs.String(), "fetch failed; trying again")
	refused := strings.Count(logs.String(), "does not chain to a root in")
	fetched := strings.Count(logs.String(), "level=INFO msg=fetched")
	if failed != 2 || refused != 1 || fetched != 1 {
		t.Errorf("logged %d failures (%d refusals of the server) and %d successes, want 2 (1) and 1:\n%s", failed, refused, fetched, logs)
	}
}

// replace puts body at path whole, by a rename.
func replace(t *testing.T, path string, body []byte) {
	t.Helper()
	if err := os.WriteFile(path+".new", body, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

// TestCalledWrongly: a call meshtls cannot act on is refused with exit 2,
// saying what was wrong, before anything is fetched or served.
func TestCalledWrongly(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	file := filepath.Join(root, "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "usage:"},
		{[]string{"get"}, `meshtls: unknown command "get"`},
		{[]string{"fetch", "-ca", "ca.pem", "http://web.alpha.internal:8080/"}, `the URL must be https://, not "http://web.alpha.internal:8080/"`},
		{[]string{"fetch", "-ca", "ca.pem"}, "give one URL, after the flags"},
		{[]string{"fetch", "https://a.internal/", "-ca", "ca.pem"}, "give one URL, after the flags"},
		{[]string{"fetch", "https://a.internal/"}, "-ca is required"},
		{[]string{"fetch", "-ca", "ca.pem", "https:///"}, "names no host"},
		{[]string{"fetch", "-ca", "ca.pem", "-every", "-1s", "https://a.internal/"}, "-every must be 0 or more"},
		{[]string{"fetch", "-insecure", "https://a.internal/"}, "flag provided but not defined: -insecure"},
		{[]string{"serve", "extra"}, "serve takes no arguments"},
		{[]string{"serve", "-root", filepath.Join(root, "absent")}, "-root " + filepath.Join(root, "absent") + ": stat"},
		{[]string{"serve", "-root", file}, "is not a directory"},
		{[]string{"serve", "-root", root, "-addr", "127.0.0.1:99999"}, "listen on -addr 127.0.0.1:99999"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		want := 2
		if strings.HasPrefix(tc.want, "listen") {
			want = 1 // the call was right; the machine refused
		}
		if code != want || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("meshtls %q: exit %d, stderr %q; want exit %d saying %q", tc.args, code, stderr.String(), want, tc.want)
		}
	}
}
