package resolver

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// start runs a resolver on 127.0.0.1:0 and returns it with its address. It
// stops when the test ends, and Run must return nil then.
func start(t testing.TB, cfg Config, z Zone) (*Server, string) {
	t.Helper()
	if cfg.Listen == nil {
		cfg.Listen = []string{"127.0.0.1:0"}
	}
	if cfg.Upstreams == nil {
		t.Fatal("test resolver without an upstream: a test never forwards to the machine's own resolver")
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetZone(z)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("resolver not ready after 10s")
	}
	return s, s.Addrs()[0]
}

// upstream is a DNS server a test starts on loopback (UDP and TCP on one
// port) that counts what it is asked.
type upstream struct {
	addr string
	mu   sync.Mutex
	seen []seenQuery
}

type seenQuery struct {
	net  string
	name string
	id   uint16
	port int
}

// startUpstream serves h on 127.0.0.1, UDP and TCP on one port.
func startUpstream(t testing.TB, h func(w dns.ResponseWriter, r *dns.Msg)) *upstream {
	t.Helper()
	u := &upstream{}
	pc, l, err := bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = pc.LocalAddr().String()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		var q seenQuery
		switch a := w.RemoteAddr().(type) {
		case *net.UDPAddr:
			q.net, q.port = "udp", a.Port
		case *net.TCPAddr:
			q.net, q.port = "tcp", a.Port
		}
		q.id = r.Id
		if len(r.Question) > 0 {
			q.name = r.Question[0].Name
		}
		u.mu.Lock()
		u.seen = append(u.seen, q)
		u.mu.Unlock()
		h(w, r)
	})
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs after the shutdowns below
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: handler}, {Listener: l, Handler: handler}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		wg.Add(1)
		go func() { defer wg.Done(); srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
	return u
}

// count is how many queries the upstream has had.
func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

// countOf is how many queries for name the upstream has had.
func (u *upstream) countOf(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, q := range u.seen {
		if q.name == name {
			n++
		}
	}
	return n
}

func (u *upstream) queries() []seenQuery {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenQuery(nil), u.seen...)
}

// answerA answers every A query with 192.0.2.1 and the given TTL, NOERROR
// with no answer for other types.
func answerA(ttl uint32) func(w dns.ResponseWriter, r *dns.Msg) {
	return func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		if r.Question[0].Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
				A:   net.IPv4(192, 0, 2, 1),
			})
		}
		w.WriteMsg(m)
	}
}

// ask sends one query over network ("udp" or "tcp") and fails the test on an
// exchange error. bufsize 0 sends no OPT.
func ask(t testing.TB, network, addr, name string, qtype uint16, bufsize uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	if bufsize > 0 {
		m.SetEdns0(bufsize, false)
	}
	return exchange(t, network, addr, m)
}

func exchange(t testing.TB, network, addr string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 5 * time.Second, UDPSize: 65535}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s query %s %s: %v", network, m.Question[0].Name, dns.TypeToString[m.Question[0].Qtype], err)
	}
	return r
}

// fakeWriter is a dns.ResponseWriter that keeps what is written.
type fakeWriter struct {
	remote net.Addr
	out    []byte
	writes int
}

func newFakeWriter(remote net.Addr) *fakeWriter {
	return &fakeWriter{remote: remote, out: make([]byte, 0, dns.MaxMsgSize)}
}

func (f *fakeWriter) LocalAddr() net.Addr  { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53} }
func (f *fakeWriter) RemoteAddr() net.Addr { return f.remote }
func (f *fakeWriter) Write(b []byte) (int, error) {
	f.out = append(f.out[:0], b...)
	f.writes++
	return len(b), nil
}
func (f *fakeWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	return err
}
func (f *fakeWriter) Close() error        { return nil }
func (f *fakeWriter) TsigStatus() error   { return nil }
func (f *fakeWriter) TsigTimersOnly(bool) {}
func (f *fakeWriter) Hijack()             {}

var (
	udpClient = &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	tcpClient = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
)

// addrs parses addresses for a zone.
func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// answerAddrs are the A and AAAA addresses of an answer, in order.
func answerAddrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	return out
}

func boolp(b bool) *bool { return &b }

// askUDPRaw sends m over UDP and returns the answer and its size on the wire.
func askUDPRaw(t testing.TB, addr string, m *dns.Msg) (*dns.Msg, int) {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("udp query %s: %v", m.Question[0].Name, err)
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatalf("unpack answer: %v", err)
	}
	if r.Id != m.Id {
		t.Fatalf("answer ID %d, asked %d", r.Id, m.Id)
	}
	return r, n
}

func udpFrom(a netip.Addr) *net.UDPAddr {
	return net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 40000))
}
