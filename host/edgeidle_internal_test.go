package host

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestEdgeClosesIdleConnections: a client's keep-alive connection, over
// plain HTTP and over HTTPS, serves one request after another, and once
// it has been idle for the edge's idle timeout the edge closes it, well
// before the read-header timeout would.
func TestEdgeClosesIdleConnections(t *testing.T) {
	t.Parallel()
	const name = "idle.example.test"
	r := newEdgeRig(t)
	g := newEdge(r.dir, "", r.log)
	g.timeouts = edgeTimeouts{idle: time.Second}
	r.serve(t, g, map[string]string{name: edgePage(t, "awake")})
	r.waitLeaf(t, name, 60*time.Second)
	limits := g.timeouts.orDefaults()

	for _, c := range []struct {
		listener string
		dial     func() (net.Conn, error)
		host     string
		status   int
	}{
		// No name is redirected here: the 421 keeps the connection.
		{"http", func() (net.Conn, error) { return net.Dial("tcp", r.httpAddr) }, "stranger.example.test", http.StatusMisdirectedRequest},
		{"https", func() (net.Conn, error) {
			return tls.Dial("tcp", r.httpsAddr, &tls.Config{ServerName: name, RootCAs: r.roots})
		}, name, http.StatusOK},
	} {
		t.Run(c.listener, func(t *testing.T) {
			t.Parallel()
			conn, err := c.dial()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			in := bufio.NewReader(conn)
			for i := range 2 {
				if err := askOnce(conn, in, c.host, c.status); err != nil {
					t.Fatalf("request %d on one connection: %v", i+1, err)
				}
			}
			idle := time.Now()
			conn.SetReadDeadline(idle.Add(limits.readHeader))
			n, err := io.Copy(io.Discard, in)
			took := time.Since(idle)
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout():
				t.Fatalf("the edge still holds the connection idle %s (idle timeout %s)", took.Round(time.Millisecond), limits.idle)
			case n > 0:
				t.Fatalf("the edge sent %d bytes on an idle connection", n)
			case took < limits.idle-200*time.Millisecond:
				t.Fatalf("the edge closed the connection idle %s (%v), before the idle timeout %s", took.Round(time.Millisecond), err, limits.idle)
			}
			t.Logf("closed once idle %s (idle timeout %s)", took.Round(time.Millisecond), limits.idle)
		})
	}
}

// askOnce sends a GET for host on conn and reads its whole answer from in,
// which must have the status want and keep the connection.
func askOnce(conn net.Conn, in *bufio.Reader, host string, want int) error {
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		return err
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(in, nil)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return err
	}
	if res.StatusCode != want || res.Close {
		return fmt.Errorf("%s (close %v), want %d on a connection kept", res.Status, res.Close, want)
	}
	return nil
}
