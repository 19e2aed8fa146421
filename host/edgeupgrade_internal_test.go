package host

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// wsAccept is the Sec-WebSocket-Accept that answers key (RFC 6455).
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// wsEcho is a backend that accepts a WebSocket upgrade, greets, and then
// echoes every byte it reads: what goes through is the edge's to carry
// both ways, so no framing is needed.
func wsEcho(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "websocket" || r.Header.Get("Sec-WebSocket-Key") == "" {
		http.Error(w, "not a websocket upgrade", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\nhello from the backend\n",
		wsAccept(r.Header.Get("Sec-WebSocket-Key")))
	if brw.Flush() != nil {
		return
	}
	io.Copy(conn, brw)
}

// TestEdgePassesWebSocketUpgrades: a client's WebSocket upgrade over the
// edge's HTTPS reaches the backend, whose 101 comes back with its
// Sec-WebSocket-Accept, and bytes then go both ways: the backend's
// greeting to the client, the client's lines echoed back.
func TestEdgePassesWebSocketUpgrades(t *testing.T) {
	t.Parallel()
	rig := newEdgeRig(t)
	backend := httptest.NewServer(http.HandlerFunc(wsEcho))
	t.Cleanup(backend.Close)
	const name = "ws.example.test"
	rig.edge(t, edgeRenew{}, map[string]string{name: backend.URL})
	rig.waitLeaf(t, name, 60*time.Second)

	conn, err := tls.Dial("tcp", rig.httpsAddr, &tls.Config{ServerName: name, RootCAs: rig.roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	nonce := make([]byte, 16)
	rand.Read(nonce)
	key := base64.StdEncoding.EncodeToString(nonce)
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("https://%s:%d/chat", name, rig.httpsPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Key", key)
	req.Header.Set("Sec-WebSocket-Version", "13")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols || res.Header.Get("Upgrade") != "websocket" || res.Header.Get("Sec-WebSocket-Accept") != wsAccept(key) {
		body, _ := io.ReadAll(res.Body)
		t.Fatalf("the upgrade through the edge: %s %v %q, want 101 with the backend's accept", res.Status, res.Header, body)
	}
	if line, err := br.ReadString('\n'); err != nil || line != "hello from the backend\n" {
		t.Fatalf("the backend's greeting: %q, %v", line, err)
	}
	for i := range 3 {
		want := fmt.Sprintf("ping %d\n", i)
		if _, err := io.WriteString(conn, want); err != nil {
			t.Fatal(err)
		}
		if line, err := br.ReadString('\n'); err != nil || line != want {
			t.Fatalf("echo %d: %q, %v; want %q", i, line, err, want)
		}
	}
}
