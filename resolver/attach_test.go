package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/miekg/dns"
)

// logRecords is a slog.Handler that keeps every record's message.
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecords) WithGroup(string) slog.Handler      { return l }

// count is how many records had message msg.
func (l *logRecords) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// runServer runs a resolver on cfg (127.0.0.1:0 unless Listen is given)
// serving testZone, and returns it once ready with stop, which ends Run and
// returns what Run did. The test's end stops it too, and Run must return nil.
func runServer(t *testing.T, cfg Config, log *slog.Logger) (s *Server, stop func() error) {
	t.Helper()
	if cfg.Listen == nil {
		cfg.Listen = []string{"127.0.0.1:0"}
	}
	if cfg.Upstreams == nil {
		cfg.Upstreams = []string{"127.0.0.1:1"} // never asked
	}
	s, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	s.SetZone(testZone)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(15 * time.Second):
				runErr = errors.New("Run did not return 15s after ctx ended")
			}
		})
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
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
	return s, stop
}

// attach attaches addr and returns the address Addrs reports for it, the
// last.
func attach(t *testing.T, s *Server, addr string, allow netip.Prefix) string {
	t.Helper()
	before := len(s.Addrs())
	if err := s.Attach(addr, allow); err != nil {
		t.Fatalf("Attach(%s, %s): %v", addr, allow, err)
	}
	got := s.Addrs()
	if len(got) != before+1 {
		t.Fatalf("Attach(%s) bound nothing: Addrs %v", addr, got)
	}
	return got[len(got)-1]
}

// allowList is the allowed prefixes now.
func allowList(s *Server) []netip.Prefix { return *s.allow.Load() }

// TestAttachServes: an attached address (port 0: Addrs reports the port
// bound) is served over UDP and TCP, the mesh's names and forwarded ones,
// after the Listen addresses in Addrs, and logged once.
func TestAttachServes(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	log := &logRecords{}
	s, _ := runServer(t, Config{Upstreams: []string{up.addr}}, slog.New(log))
	first := s.Addrs()[0]

	a := attach(t, s, "127.0.0.2:0", netip.MustParsePrefix("10.0.0.0/8"))
	if got := s.Addrs(); len(got) != 2 || got[0] != first {
		t.Fatalf("Addrs %v, want %s first and the attached address", got, first)
	}
	host, port, _ := net.SplitHostPort(a)
	if host != "127.0.0.2" || port == "0" {
		t.Fatalf("attached address %s, want 127.0.0.2 and the port bound", a)
	}
	for _, network := range []string{"udp", "tcp"} {
		if r := ask(t, network, a, "alpha.internal.", dns.TypeA, 0); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
			t.Errorf("%s %s alpha.internal.: %s, answer %v", network, a, dns.RcodeToString[r.Rcode], r.Answer)
		}
		if r := ask(t, network, a, "www.example.com.", dns.TypeA, 1232); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Errorf("%s %s www.example.com.: %s, answer %v", network, a, dns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	// The first address still serves.
	if r := ask(t, "udp", first, "alpha.internal.", dns.TypeA, 0); len(r.Answer) != 2 {
		t.Errorf("udp %s after Attach: answer %v", first, r.Answer)
	}
	if n := log.count("resolver attached"); n != 1 {
		t.Errorf("%d \"resolver attached\" lines, want 1", n)
	}
}

// TestAttachAllow: with loopback not allowed, a query from 127.0.0.1 is
// REFUSED; once an Attach allows 127.0.0.0/8 it is answered, on the Listen
// address and the attached one alike. The same prefix, however spelled, is
// not added twice.
func TestAttachAllow(t *testing.T) {
	t.Parallel()
	s, _ := runServer(t, Config{AllowLoopback: boolp(false)}, nil)
	first := s.Addrs()[0]
	for _, network := range []string{"udp", "tcp"} {
		if r := ask(t, network, first, "alpha.internal.", dns.TypeA, 1232); r.Rcode != dns.RcodeRefused {
			t.Fatalf("%s before Attach: %s, want REFUSED", network, dns.RcodeToString[r.Rcode])
		}
	}

	a := attach(t, s, "127.0.0.2:0", netip.MustParsePrefix("127.0.0.0/8"))
	for _, addr := range []string{first, a} {
		for _, network := range []string{"udp", "tcp"} {
			if r := ask(t, network, addr, "alpha.internal.", dns.TypeA, 1232); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
				t.Errorf("%s %s after Attach: %s, answer %v", network, addr, dns.RcodeToString[r.Rcode], r.Answer)
			}
		}
	}

	for _, p := range []string{"127.0.0.0/8", "127.1.2.3/8", "::ffff:127.0.0.0/104"} {
		if err := s.Attach(a, netip.MustParsePrefix(p)); err != nil {
			t.Fatalf("Attach(%s, %s): %v", a, p, err)
		}
	}
	if got := allowList(s); len(got) != 1 || got[0] != netip.MustParsePrefix("127.0.0.0/8") {
		t.Errorf("allowed %v, want [127.0.0.0/8] once", got)
	}
	// A new prefix on an address served is added.
	if err := s.Attach(first, netip.MustParsePrefix("192.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	if got := allowList(s); len(got) != 2 || !s.allowed(netip.MustParseAddr("192.0.2.9")) {
		t.Errorf("allowed %v, want 127.0.0.0/8 and 192.0.2.0/24", got)
	}
}

// TestAttachTwice: an address served already, by Listen or an earlier
// Attach, however spelled, binds nothing and logs nothing; a wildcard
// Listen address serves the addresses of its family on its port.
func TestAttachTwice(t *testing.T) {
	t.Parallel()
	log := &logRecords{}
	s, _ := runServer(t, Config{}, slog.New(log))
	p := netip.MustParsePrefix("10.0.0.0/8")
	a := attach(t, s, "127.0.0.2:0", p)
	_, port, _ := net.SplitHostPort(a)
	for _, again := range []string{a, "[::ffff:127.0.0.2]:" + port, s.Addrs()[0]} {
		if err := s.Attach(again, p); err != nil {
			t.Errorf("Attach(%s) again: %v", again, err)
		}
	}
	if got := s.Addrs(); len(got) != 2 || got[1] != a {
		t.Errorf("Addrs %v, want the Listen address and %s once", got, a)
	}
	s.mu.Lock()
	n := 0
	for _, a := range s.attached {
		if a.ls != nil {
			n++
		}
	}
	s.mu.Unlock()
	if n != 1 {
		t.Errorf("%d attached listeners, want 1", n)
	}
	if n := log.count("resolver attached"); n != 1 {
		t.Errorf("%d \"resolver attached\" lines, want 1", n)
	}
	if got := allowList(s); len(got) != 1 {
		t.Errorf("allowed %v, want 10.0.0.0/8 once", got)
	}

	// 0.0.0.0:port serves 127.0.0.2:port: nothing bound, only the prefix.
	w, _ := runServer(t, Config{Listen: []string{"0.0.0.0:0"}, AllowLoopback: boolp(false)}, nil)
	_, wport, _ := net.SplitHostPort(w.Addrs()[0])
	wa := "127.0.0.2:" + wport
	if err := w.Attach(wa, netip.MustParsePrefix("127.0.0.0/8")); err != nil {
		t.Fatalf("Attach(%s) under 0.0.0.0:%s: %v", wa, wport, err)
	}
	if got := w.Addrs(); len(got) != 1 {
		t.Errorf("Addrs %v, want the wildcard alone", got)
	}
	if r := ask(t, "udp", wa, "alpha.internal.", dns.TypeA, 0); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Errorf("udp %s: %s, answer %v", wa, dns.RcodeToString[r.Rcode], r.Answer)
	}
}

// TestBoundServes: which addresses a bound one already serves.
func TestBoundServes(t *testing.T) {
	t.Parallel()
	ap := netip.MustParseAddrPort
	tests := []struct {
		bound boundAddr
		want  string
		dual  bool
		serve bool
	}{
		{boundAddr{ap("172.30.5.1:53"), false}, "172.30.5.1:53", false, true},
		{boundAddr{ap("172.30.5.1:53"), false}, "172.30.5.1:54", false, false},
		{boundAddr{ap("172.30.5.1:53"), false}, "172.30.5.2:53", false, false},
		{boundAddr{ap("172.30.5.1:0"), false}, "172.30.5.1:0", false, false},
		{boundAddr{ap("0.0.0.0:53"), false}, "172.30.5.1:53", false, true},
		{boundAddr{ap("0.0.0.0:53"), false}, "[fd00::1]:53", false, false},
		{boundAddr{ap("0.0.0.0:53"), false}, "[::]:53", true, false},
		{boundAddr{ap("[::]:53"), false}, "[fd00::1]:53", false, true},
		{boundAddr{ap("[::]:53"), false}, "172.30.5.1:53", false, false},
		{boundAddr{ap("[::]:53"), true}, "172.30.5.1:53", false, true},
		{boundAddr{ap("[::]:53"), true}, "[::]:53", true, true},
		{boundAddr{ap("[::]:53"), false}, "[::]:53", true, false},
		{boundAddr{ap("[fe80::1%eth0]:53"), false}, "[fe80::1%eth0]:53", false, true},
	}
	for _, tc := range tests {
		if got := tc.bound.serves(ap(tc.want), tc.dual); got != tc.serve {
			t.Errorf("%v (dual %v) serves %s (dual %v): %v, want %v", tc.bound.ap, tc.bound.dual, tc.want, tc.dual, got, tc.serve)
		}
	}
}

// TestAttachAfterRun: Attach before Ready is an error; when Run ends, the
// attached address is unbound (UDP and TCP) and Attach is an error.
func TestAttachAfterRun(t *testing.T) {
	t.Parallel()
	idle, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.Attach("127.0.0.2:0", netip.MustParsePrefix("10.0.0.0/8")); err == nil {
		t.Error("Attach before Run: no error")
	}

	s, stop := runServer(t, Config{}, nil)
	p := netip.MustParsePrefix("10.0.0.0/8")
	// A port the test holds, bound again below once Run ended (testport).
	a := attach(t, s, testport.Addr(t, "127.0.0.2"), p)
	if r := ask(t, "tcp", a, "alpha.internal.", dns.TypeA, 0); len(r.Answer) != 2 {
		t.Fatalf("tcp %s: answer %v", a, r.Answer)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	pc, err := net.ListenPacket("udp", a)
	if err != nil {
		t.Errorf("udp %s still bound after Run: %v", a, err)
	} else {
		pc.Close()
	}
	l, err := net.Listen("tcp", a)
	if err != nil {
		t.Errorf("tcp %s still bound after Run: %v", a, err)
	} else {
		l.Close()
	}
	for _, addr := range []string{a, "127.0.0.3:0"} {
		if err := s.Attach(addr, p); err == nil {
			t.Errorf("Attach(%s) after Run: no error", addr)
		}
	}
}

// TestAttachBindFailure: an address taken, UDP or TCP, is an error naming
// it; Addrs and the allowed prefixes stay as they were, and the half bound
// is unbound.
func TestAttachBindFailure(t *testing.T) {
	t.Parallel()
	s, _ := runServer(t, Config{}, nil)
	p := netip.MustParsePrefix("10.0.0.0/8")
	busyUDP, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyUDP.Close()
	// A port the test holds: its UDP side is bound again below (testport).
	busyTCP, err := net.Listen("tcp", testport.Addr(t, "127.0.0.2"))
	if err != nil {
		t.Fatal(err)
	}
	defer busyTCP.Close()
	before := s.Addrs()
	for _, addr := range []string{busyUDP.LocalAddr().String(), busyTCP.Addr().String()} {
		err := s.Attach(addr, p)
		if err == nil || !strings.Contains(err.Error(), addr) {
			t.Errorf("Attach(%s) taken: %v, want an error naming it", addr, err)
		}
		if got := s.Addrs(); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Errorf("Addrs after a failed Attach %v, want %v", got, before)
		}
		if got := allowList(s); len(got) != 0 {
			t.Errorf("allowed after a failed Attach: %v", got)
		}
	}
	// TCP's port was taken: UDP's, bound first, is free again.
	pc, err := net.ListenPacket("udp", busyTCP.Addr().String())
	if err != nil {
		t.Errorf("udp %s bound after a failed Attach: %v", busyTCP.Addr(), err)
	} else {
		pc.Close()
	}

	// What Attach refuses before binding.
	for _, tc := range []struct {
		addr  string
		allow netip.Prefix
		err   string
	}{
		{"127.0.0.2", p, `"127.0.0.2"`},
		{"localhost:53", p, "not an IP address"},
		{"127.0.0.2:0", netip.Prefix{}, "not a valid prefix"},
		{"127.0.0.1:1", p, "ask itself"}, // runServer's upstream
	} {
		if err := s.Attach(tc.addr, tc.allow); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Attach(%s, %s): %v, want an error with %q", tc.addr, tc.allow, err, tc.err)
		}
	}
	if got := s.Addrs(); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("Addrs %v, want %v", got, before)
	}
}

// TestAttachUnderQueries: Attach swaps the allowed prefixes while queries
// are answered on every UDP reader and TCP; run with -race.
func TestAttachUnderQueries(t *testing.T) {
	t.Parallel()
	s, _ := runServer(t, Config{AllowLoopback: boolp(false), Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, nil)
	first := s.Addrs()[0]
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	var started sync.WaitGroup
	started.Add(4)
	for i := range 4 {
		network := []string{"udp", "tcp"}[i%2]
		wg.Go(func() {
			c := &dns.Client{Net: network, Timeout: 5 * time.Second}
			for q := 0; q < 50 || ctx.Err() == nil; q++ {
				if q == 10 {
					started.Done() // attaching starts once each has been answered
				}
				m := new(dns.Msg)
				m.SetQuestion("alpha.internal.", dns.TypeA)
				r, _, err := c.Exchange(m, first)
				if err == nil && (r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2) {
					err = fmt.Errorf("%s, answer %v", dns.RcodeToString[r.Rcode], r.Answer)
				}
				if err != nil {
					mu.Lock()
					bad = append(bad, network+": "+err.Error())
					mu.Unlock()
					if q < 10 {
						started.Done()
					}
					return
				}
			}
		})
	}
	started.Wait()
	const n = 16
	var last string
	for i := range n {
		last = attach(t, s, fmt.Sprintf("127.0.1.%d:0", i+1), netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16))
	}
	cancel()
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("queries while attaching: %v", bad)
	}
	if got := allowList(s); len(got) != 1+n {
		t.Errorf("%d allowed prefixes, want %d: %v", len(got), 1+n, got)
	}
	if got := s.Addrs(); len(got) != 1+n || got[0] != first {
		t.Errorf("Addrs %v, want %s then %d attached", got, first, n)
	}
	if r := ask(t, "udp", last, "alpha.internal.", dns.TypeA, 0); len(r.Answer) != 2 {
		t.Errorf("udp %s: answer %v", last, r.Answer)
	}
}
