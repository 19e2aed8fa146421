package host

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEdgeAnswersNoPageForOtherNames: a request whose Host is not a public
// name of the roster, or that has no Host, gets a 421 and no page, over
// plain HTTP (no redirect) and over HTTPS (a connection made for a served
// name, then asking for another); an HTTPS client that names no server
// gets no certificate at all. A served name, beside them, is redirected
// and served.
func TestEdgeAnswersNoPageForOtherNames(t *testing.T) {
	t.Parallel()
	const served, page = "misdirect.example.test", "the served page"
	r := newEdgeRig(t)
	r.edge(t, edgeRenew{}, map[string]string{served: edgePage(t, page)})
	r.waitLeaf(t, served, 60*time.Second)

	plain := func() (net.Conn, error) { return net.DialTimeout("tcp", r.httpAddr, 5*time.Second) }
	secure := func(sni string) func() (net.Conn, error) {
		return func() (net.Conn, error) {
			d := &net.Dialer{Timeout: 5 * time.Second}
			if sni == "" {
				// No name to verify against: the edge is to refuse the
				// handshake, not the client.
				return tls.DialWithDialer(d, "tcp", r.httpsAddr, &tls.Config{InsecureSkipVerify: true})
			}
			return tls.DialWithDialer(d, "tcp", r.httpsAddr, &tls.Config{ServerName: sni, RootCAs: r.roots})
		}
	}
	const noPage = "421 misdirected request: this edge serves no such name"
	for _, c := range []struct {
		name    string
		dial    func() (net.Conn, error)
		request string
		status  int    // 0: the connection fails
		body    string // what the answer (a redirect's Location) holds
	}{
		{"http, another name", plain, "GET / HTTP/1.1\r\nHost: stranger.example.test\r\n\r\n", http.StatusMisdirectedRequest, noPage},
		{"http, the edge's address", plain, "GET / HTTP/1.1\r\nHost: " + r.httpAddr + "\r\n\r\n", http.StatusMisdirectedRequest, noPage},
		{"http, no host", plain, "GET / HTTP/1.0\r\n\r\n", http.StatusMisdirectedRequest, noPage},
		{"http, the served name", plain, "GET /a HTTP/1.1\r\nHost: " + served + "\r\n\r\n", http.StatusPermanentRedirect, fmt.Sprintf("https://%s:%d/a", served, r.httpsPort)},
		{"https, another name", secure(served), "GET / HTTP/1.1\r\nHost: stranger.example.test\r\n\r\n", http.StatusMisdirectedRequest, noPage},
		{"https, no host", secure(served), "GET / HTTP/1.0\r\n\r\n", http.StatusMisdirectedRequest, noPage},
		{"https, no server name", secure(""), "GET / HTTP/1.1\r\nHost: " + served + "\r\n\r\n", 0, ""},
		{"https, the served name", secure(served), "GET / HTTP/1.1\r\nHost: " + served + "\r\n\r\n", http.StatusOK, page},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			status, body, err := askRaw(c.dial, c.request)
			if c.status == 0 {
				if err == nil {
					t.Fatalf("%d %q, want the handshake to fail", status, body)
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if status != c.status || !strings.Contains(body, c.body) {
				t.Errorf("%d %q, want %d holding %q", status, body, c.status, c.body)
			}
			if c.status == http.StatusMisdirectedRequest && strings.Contains(body, page) {
				t.Errorf("the answer for a name not served holds the served page: %q", body)
			}
		})
	}
}

// askRaw sends request, as it is, on a connection dial makes: the answer's
// status and body (its Location for a redirect).
func askRaw(dial func() (net.Conn, error), request string) (int, string, error) {
	conn, err := dial()
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		return 0, "", err
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", fmt.Errorf("read the answer: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, "", err
	}
	if loc := res.Header.Get("Location"); loc != "" {
		return res.StatusCode, loc, nil
	}
	return res.StatusCode, string(b), nil
}
