package host

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestEdgeGivesUpOnSilentBackends: a backend that takes the connection and
// never sends its response headers, one that never finishes its TLS
// handshake, and one whose dial is never answered each get the client a
// 502 naming the route once the edge's backend timeout for that step has
// passed, not a request held open.
func TestEdgeGivesUpOnSilentBackends(t *testing.T) {
	t.Parallel()
	r := newEdgeRig(t)
	// A TLS backend is verified against the mesh's root: any root will
	// do, the handshake never gets as far as the backend's certificate.
	root, err := os.ReadFile(r.pb.Root)
	if err != nil {
		t.Fatal(err)
	}
	g := newEdge(r.dir, string(root), r.log)
	g.timeouts = edgeTimeouts{backendDial: time.Second, backendHeader: 2 * time.Second}
	limits := g.timeouts.orDefaults()
	cases := []struct {
		name, backend string
		within        time.Duration
	}{
		{"mute.example.test", "http://" + silentBackend(t), limits.backendHeader},
		{"shy.example.test", "https://" + silentBackend(t), limits.backendDial},
		{"unheard.example.test", "http://" + unansweredBackend(t), limits.backendDial},
	}
	backends := map[string]string{}
	for _, c := range cases {
		backends[c.name] = c.backend
	}
	r.serve(t, g, backends)
	for _, c := range cases {
		r.waitLeaf(t, c.name, 60*time.Second)
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			client := &http.Client{Timeout: c.within + 10*time.Second, Transport: &http.Transport{
				DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
					return (&net.Dialer{}).DialContext(ctx, network, r.httpsAddr)
				},
				TLSClientConfig: &tls.Config{RootCAs: r.roots},
			}}
			start := time.Now()
			res, err := client.Get(fmt.Sprintf("https://%s:%d/", c.name, r.httpsPort))
			if err != nil {
				t.Fatalf("through the edge: %v", err)
			}
			defer res.Body.Close()
			body, err := io.ReadAll(res.Body)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			route := spec.RouteName(strings.Split(c.name, ".")[0], "alpha")
			if res.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), route) {
				t.Errorf("%s: %q, want a 502 naming %s", res.Status, body, route)
			}
			if took < c.within-100*time.Millisecond || took > c.within+5*time.Second {
				t.Errorf("answered %s after the request, want about the backend timeout %s", took.Round(time.Millisecond), c.within)
			}
			t.Logf("%s %s after the request (backend timeout %s)", res.Status, took.Round(time.Millisecond), c.within)
		})
	}
}

// silentBackend is the address of a backend that takes every connection,
// reads what it is sent and never answers, until the test ends.
func silentBackend(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				go func() {
					<-t.Context().Done()
					conn.Close()
				}()
				io.Copy(io.Discard, conn)
			}()
		}
	}()
	return l.Addr().String()
}

// unansweredBackend is the address of a backend whose dial is never
// answered, until the test ends: a socket listening with a backlog of
// one that is never accepted from, filled by a first connection, so the
// kernel drops every later connection's SYN.
func unansweredBackend(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	first, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("fill the backlog of %s: %v", addr, err)
	}
	t.Cleanup(func() { first.Close() })
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatalf("%s still answers a dial with its backlog full", addr)
	}
	return addr
}

// TestEdgeTimeoutsDefaultToTheConstants: an edge no test shortens runs with
// the edge's constant timeouts, and one shortened keeps the rest.
func TestEdgeTimeoutsDefaultToTheConstants(t *testing.T) {
	t.Parallel()
	want := edgeTimeouts{readHeader: edgeReadHeader, idle: edgeIdle, backendDial: edgeBackendDial, backendHeader: edgeBackendHeader}
	if got := (edgeTimeouts{}).orDefaults(); got != want {
		t.Errorf("no timeout given: %+v, want %+v", got, want)
	}
	want.idle = time.Second
	if got := (edgeTimeouts{idle: time.Second}).orDefaults(); got != want {
		t.Errorf("the idle timeout given: %+v, want %+v", got, want)
	}
}
