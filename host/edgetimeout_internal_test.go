package host

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/spec"
)

// TestEdgeCutsOffSlowClients: a client that trickles its request headers
// over plain HTTP, or never finishes its TLS handshake, is cut off by the
// edge once the read-header timeout has passed, not held open.
func TestEdgeCutsOffSlowClients(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "waits out the 10 s read-header timeout")
	// No name is served, so no CA is asked for anything.
	g := newEdge(filepath.Join(t.TempDir(), EdgeDir), "", slog.New(slog.DiscardHandler))
	t.Cleanup(g.stop)
	e := spec.EdgeSpec{Name: "edge", HTTP: testport.Addr(t, "127.0.0.1"), HTTPS: testport.Addr(t, "127.0.0.1"), ACMECA: "https://127.0.0.1:9/dir"}
	if err := g.configure(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, addr string
		send       func(net.Conn, <-chan struct{})
	}{
		{"headers trickled over http", e.HTTP, trickle},
		{"a handshake never finished over https", e.HTTPS, func(net.Conn, <-chan struct{}) {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", c.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			done := make(chan struct{})
			defer close(done)
			go c.send(conn, done)
			conn.SetReadDeadline(start.Add(edgeReadHeader + 10*time.Second))
			_, err = io.ReadAll(conn)
			took := time.Since(start)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the edge still holds the connection %s after it opened (read-header timeout %s)", took.Round(time.Millisecond), edgeReadHeader)
			}
			if took < edgeReadHeader-time.Second {
				t.Fatalf("the edge closed the connection %s after it opened (%v), before the read-header timeout %s", took.Round(time.Millisecond), err, edgeReadHeader)
			}
			t.Logf("cut off %s after it opened", took.Round(time.Millisecond))
		})
	}
}

// trickle writes the start of a request, then one byte of a header every
// 200 ms, until done or a write fails.
func trickle(conn net.Conn, done <-chan struct{}) {
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: slow.example.test\r\nX-Slow: "); err != nil {
		return
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if _, err := io.WriteString(conn, "a"); err != nil {
				return
			}
		}
	}
}
