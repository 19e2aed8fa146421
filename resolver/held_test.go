package resolver

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/miekg/dns"
)

// TestHeldSocketsAnswerAcrossASwap: an address bound once (as a launcher
// binds the machine's resolver address) and handed as copies to one server,
// then to the next: a query sent, over UDP and over TCP, while neither
// serves waits in the socket, and the next server answers it.
func TestHeldSocketsAnswerAcrossASwap(t *testing.T) {
	t.Parallel()
	pc, l, err := Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	defer l.Close()
	addr := pc.LocalAddr().String()
	copyOf := func() Held {
		uf, err := pc.(*net.UDPConn).File()
		if err != nil {
			t.Fatal(err)
		}
		tf, err := l.(*net.TCPListener).File()
		if err != nil {
			t.Fatal(err)
		}
		defer uf.Close()
		defer tf.Close()
		upc, err := net.FilePacketConn(uf)
		if err != nil {
			t.Fatal(err)
		}
		tl, err := net.FileListener(tf)
		if err != nil {
			t.Fatal(err)
		}
		return Held{Addr: addr, UDP: upc, TCP: tl}
	}
	zone := Zone{Names: map[string][]netip.Addr{"a.internal": {netip.MustParseAddr("10.0.0.1")}}}
	run := func() (stop func()) {
		s, err := New(Config{Listen: []string{addr}, Upstreams: []string{"127.0.0.1:9"}, Held: []Held{copyOf()}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.SetZone(zone)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		select {
		case <-s.Ready():
		case err := <-done:
			t.Fatalf("Run: %v", err)
		}
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	query, _ := (&dns.Msg{Question: []dns.Question{{Name: "a.internal.", Qtype: dns.TypeA, Qclass: dns.ClassINET}}}).Pack()
	answerOf := func(b []byte) string {
		var m dns.Msg
		if err := m.Unpack(b); err != nil || len(m.Answer) != 1 {
			return "no answer"
		}
		return m.Answer[0].(*dns.A).A.String()
	}

	stop := run()
	if r := ask(t, "udp", addr, "a.internal.", dns.TypeA, 0); len(r.Answer) != 1 {
		t.Fatalf("the first server: %v", r)
	}
	stop()

	// Neither serves now: each query is sent, and waits.
	u, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Write(query); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("TCP between two servers: %v", err)
	}
	defer c.Close()
	framed := binary.BigEndian.AppendUint16(nil, uint16(len(query)))
	if _, err := c.Write(append(framed, query...)); err != nil {
		t.Fatal(err)
	}

	defer run()()
	u.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	n, err := u.Read(buf)
	if err != nil || answerOf(buf[:n]) != "10.0.0.1" {
		t.Errorf("the UDP query sent between two servers: %v, %s", err, answerOf(buf[:n]))
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [2]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Fatalf("the TCP query sent between two servers: %v", err)
	}
	body := make([]byte, binary.BigEndian.Uint16(size[:]))
	if _, err := io.ReadFull(c, body); err != nil || answerOf(body) != "10.0.0.1" {
		t.Errorf("the TCP query sent between two servers: %v, %s", err, answerOf(body))
	}
}

// Held sockets for an address the resolver does not listen on are refused.
func TestHeldForNoListenAddressIsRefused(t *testing.T) {
	t.Parallel()
	pc, l, err := Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	defer l.Close()
	if _, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:9"}, Held: []Held{{Addr: pc.LocalAddr().String(), UDP: pc, TCP: l}}}, nil); err == nil {
		t.Fatal("sockets held for no listen address were taken")
	}
}

// TestNoQueryLostAcrossSwaps: a client asks without pause while the held
// sockets pass from one server to the next, ten times: every query is
// answered (a server that stops answers what it read before its socket
// closes, and leaves the rest in it for the next).
func TestNoQueryLostAcrossSwaps(t *testing.T) {
	t.Parallel()
	pc, l, err := Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	defer l.Close()
	addr := pc.LocalAddr().String()
	zone := Zone{Names: map[string][]netip.Addr{"a.internal": {netip.MustParseAddr("10.0.0.1")}}}
	run := func() (stop func()) {
		uf, _ := pc.(*net.UDPConn).File()
		tf, _ := l.(*net.TCPListener).File()
		upc, _ := net.FilePacketConn(uf)
		tl, _ := net.FileListener(tf)
		uf.Close()
		tf.Close()
		s, err := New(Config{Listen: []string{addr}, Upstreams: []string{"127.0.0.1:9"}, Held: []Held{{Addr: addr, UDP: upc, TCP: tl}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.SetZone(zone)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		<-s.Ready()
		return func() { cancel(); <-done }
	}
	stop := run()
	quit, lost, finished := make(chan struct{}), make(chan string, 100000), make(chan struct{})
	var n atomic.Int64
	go func() {
		defer close(finished)
		c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
		for {
			select {
			case <-quit:
				return
			default:
			}
			m := new(dns.Msg)
			m.SetQuestion("a.internal.", dns.TypeA)
			r, _, err := c.Exchange(m, addr)
			n.Add(1)
			if err != nil || len(r.Answer) != 1 {
				lost <- fmt.Sprint(r, err)
			}
		}
	}()
	for range 10 {
		// Each server answers a few hundred before it stops.
		at := n.Load()
		poll.Until(t, 10*time.Second, "200 more answered", func() error {
			if n.Load() >= at+200 {
				return nil
			}
			return fmt.Errorf("%d answered", n.Load()-at)
		})
		stop()
		stop = run()
	}
	close(quit)
	<-finished
	stop()
	close(lost)
	for why := range lost {
		t.Errorf("a query lost across a swap: %s", why)
	}
	t.Logf("%d queries across 10 swaps", n.Load())
}
