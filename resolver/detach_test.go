package resolver

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// silent says how a UDP query to addr went unanswered: the kernel refused
// it (nothing bound there), or nil when it was answered.
func silent(t *testing.T, addr string) error {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg)
	m.SetQuestion("alpha.internal.", dns.TypeA)
	b, _ := m.Pack()
	if _, err := c.Write(b); err != nil {
		return err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	if _, err := c.Read(buf); err != nil {
		return err
	}
	return nil
}

// TestDetach: a detached address stops answering at once (a UDP query is
// refused by the kernel, a TCP connection too), leaves Addrs, and the
// prefix its Attach allowed is allowed no more; the Listen address keeps
// serving; the address can be attached again. Detaching an address no
// Attach added changes nothing; detaching a Listen address Attach only
// allowed more on takes that prefix back and keeps the address.
func TestDetach(t *testing.T) {
	t.Parallel()
	log := &logRecords{}
	s, _ := runServer(t, Config{AllowLoopback: boolp(false), Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, slog.New(log))
	first := s.Addrs()[0]
	p := netip.MustParsePrefix("127.0.0.0/8")
	a := attach(t, s, "127.0.0.2:0", p)
	if err := silent(t, a); err != nil {
		t.Fatalf("udp %s before Detach: %v", a, err)
	}

	if err := s.Detach("127.0.0.3:53"); err != nil {
		t.Errorf("Detach of an address never attached: %v", err)
	}
	if got := s.Addrs(); len(got) != 2 {
		t.Errorf("Addrs after detaching an address never attached: %v", got)
	}

	if err := s.Detach(a); err != nil {
		t.Fatalf("Detach(%s): %v", a, err)
	}
	if err := silent(t, a); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("udp %s after Detach: %v, want connection refused (nothing bound)", a, err)
	}
	if c, err := net.DialTimeout("tcp", a, 5*time.Second); err == nil {
		c.Close()
		t.Errorf("tcp %s after Detach: connected", a)
	}
	if got := s.Addrs(); len(got) != 1 || got[0] != first {
		t.Errorf("Addrs after Detach %v, want [%s]", got, first)
	}
	if got := allowList(s); len(got) != 1 || got[0] != netip.MustParsePrefix("127.0.0.1/32") {
		t.Errorf("allowed after Detach %v, want Config's 127.0.0.1/32 alone", got)
	}
	if s.allowed(netip.MustParseAddr("127.0.0.2")) {
		t.Error("127.0.0.2 is still allowed after the Attach that allowed it was detached")
	}
	if r := ask(t, "udp", first, "alpha.internal.", dns.TypeA, 0); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 {
		t.Errorf("the Listen address after Detach: %s, answer %v", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if n := log.count("resolver detached"); n != 1 {
		t.Errorf("%d \"resolver detached\" lines, want 1", n)
	}

	// Attached again on the same port: served again.
	again := attach(t, s, a, p)
	if again != a {
		t.Errorf("attached again at %s, asked %s", again, a)
	}
	if err := silent(t, a); err != nil {
		t.Errorf("udp %s attached again: %v", a, err)
	}

	// The Listen address: Attach only added a prefix, Detach takes it back
	// and the address keeps serving.
	if err := s.Attach(first, netip.MustParsePrefix("192.0.2.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := s.Detach(first); err != nil {
		t.Fatal(err)
	}
	if s.allowed(netip.MustParseAddr("192.0.2.9")) {
		t.Error("192.0.2.0/24 still allowed after detaching the Attach that allowed it")
	}
	if !s.allowed(netip.MustParseAddr("127.0.0.2")) {
		t.Error("127.0.0.0/8, allowed by the attachment that stays, is no longer allowed")
	}
	if err := silent(t, first); err != nil {
		t.Errorf("the Listen address after Detach of it: %v", err)
	}
}
