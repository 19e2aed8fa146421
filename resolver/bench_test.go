package resolver

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// benchZone is the 1,000 names bench/dns.sh serves.
func benchZone() Zone {
	z := Zone{Names: map[string][]netip.Addr{}}
	for i := range 1000 {
		z.Names[fmt.Sprintf("n%04d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})}
	}
	return z
}

// benchServe serves m through the handler b.N times and checks the answer.
func benchServe(b *testing.B, s *Server, m *dns.Msg, check func(r *dns.Msg) error) {
	w := newFakeWriter(udpClient)
	s.ServeDNS(w, m)
	r := new(dns.Msg)
	if err := r.Unpack(w.out); err != nil {
		b.Fatal(err)
	}
	if err := check(r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s.ServeDNS(w, m)
	}
}

// BenchmarkLocalA answers one of the mesh's own names, as a client with
// EDNS0 asks it.
func BenchmarkLocalA(b *testing.B) {
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:1"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	s.SetZone(benchZone())
	m := new(dns.Msg)
	m.SetQuestion("n0500.internal.", dns.TypeA)
	m.SetEdns0(1232, false)
	benchServe(b, s, m, func(r *dns.Msg) error {
		if len(r.Answer) != 1 || !r.Authoritative || r.IsEdns0() == nil {
			return fmt.Errorf("answer %v", r)
		}
		return nil
	})
}

// BenchmarkLocalNXDOMAIN answers a name under the domain that the zone does
// not hold.
func BenchmarkLocalNXDOMAIN(b *testing.B) {
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:1"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	s.SetZone(benchZone())
	m := new(dns.Msg)
	m.SetQuestion("x0500.internal.", dns.TypeA)
	m.SetEdns0(1232, false)
	benchServe(b, s, m, func(r *dns.Msg) error {
		if r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
			return fmt.Errorf("answer %v", r)
		}
		return nil
	})
}

// BenchmarkForwardCached answers a forwarded name from the cache; the
// upstream is a server the benchmark runs on loopback, asked once.
func BenchmarkForwardCached(b *testing.B) {
	up := startUpstream(b, answerA(3600))
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{up.addr}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	s.SetZone(benchZone())
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.SetEdns0(1232, false)
	benchServe(b, s, m, func(r *dns.Msg) error {
		if len(r.Answer) != 1 || r.Authoritative {
			return fmt.Errorf("answer %v", r)
		}
		return nil
	})
	if n := up.count(); n != 1 {
		b.Fatalf("upstream asked %d times, want 1", n)
	}
}

// BenchmarkLocalAPacket answers the same query as BenchmarkLocalA the way
// the UDP loop does, from the packet's bytes.
func BenchmarkLocalAPacket(b *testing.B) {
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:1"}}, nil)
	if err != nil {
		b.Fatal(err)
	}
	s.SetZone(benchZone())
	m := new(dns.Msg)
	m.SetQuestion("n0500.internal.", dns.TypeA)
	m.SetEdns0(1232, false)
	pkt, err := m.Pack()
	if err != nil {
		b.Fatal(err)
	}
	from := netip.MustParseAddr("127.0.0.1")
	out := make([]byte, 8192)
	if resp, done := s.fastAnswer(pkt, from, out); !done || resp == nil {
		b.Fatal("not answered from the bytes")
	}
	b.ReportAllocs()
	for b.Loop() {
		s.fastAnswer(pkt, from, out)
	}
}
