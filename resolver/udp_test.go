package resolver

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// TestFastAnswerMatchesHandler: the UDP loop's answer from a packet's bytes
// is byte for byte what ServeDNS answers to the unpacked query, and it
// leaves to ServeDNS what it cannot answer alone.
func TestFastAnswerMatchesHandler(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{up.addr}, Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	z := Zone{Names: map[string][]netip.Addr{"many.internal": nil}}
	for n, as := range testZone.Names {
		z.Names[n] = as
	}
	for i := range 100 {
		z.Names["many.internal"] = append(z.Names["many.internal"], netip.AddrFrom4([4]byte{10, 3, 0, byte(i)}))
	}
	s.SetZone(z)
	// Warm the cache with one forwarded name.
	warm := new(dns.Msg)
	warm.SetQuestion("cached.example.", dns.TypeA)
	s.ServeDNS(newFakeWriter(udpClient), warm)

	q := func(name string, qtype uint16, edit ...func(m *dns.Msg)) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.Id = 0xBEEF
		for _, e := range edit {
			e(m)
		}
		return m
	}
	edns := func(size uint16, do bool) func(m *dns.Msg) { return func(m *dns.Msg) { m.SetEdns0(size, do) } }
	tests := []struct {
		name string
		m    *dns.Msg
		from string
		done bool // answered from the bytes
	}{
		{"A", q("alpha.internal.", dns.TypeA), "127.0.0.1", true},
		{"A, case", q("AlPhA.InTeRnAl.", dns.TypeA), "127.0.0.1", true},
		{"AAAA, EDNS", q("alpha.internal.", dns.TypeAAAA, edns(1232, false)), "127.0.0.1", true},
		{"DO", q("alpha.internal.", dns.TypeA, edns(1232, true)), "127.0.0.1", true},
		{"no RD, CD", q("alpha.internal.", dns.TypeA, func(m *dns.Msg) { m.RecursionDesired = false; m.CheckingDisabled = true }), "127.0.0.1", true},
		{"MX NODATA", q("alpha.internal.", dns.TypeMX), "127.0.0.1", true},
		{"ANY", q("alpha.internal.", dns.TypeANY), "127.0.0.1", true},
		{"SOA apex", q("internal.", dns.TypeSOA), "127.0.0.1", true},
		{"NXDOMAIN", q("nope.internal.", dns.TypeA, edns(4096, false)), "127.0.0.1", true},
		{"empty non-terminal", q("deep.beta.internal.", dns.TypeA), "127.0.0.1", true},
		{"public name", q("drive.example.org.", dns.TypeA), "127.0.0.1", true},
		{"cached", q("CACHED.example.", dns.TypeA), "127.0.0.1", true},
		{"allowed network", q("alpha.internal.", dns.TypeA), "10.1.2.3", true},
		{"underscore", q("_x.internal.", dns.TypeA), "127.0.0.1", true},
		{"not cached", q("other.example.", dns.TypeA), "127.0.0.1", false},
		{"too large for 512", q("many.internal.", dns.TypeA), "127.0.0.1", false},
		{"fits 4096", q("many.internal.", dns.TypeA, edns(4096, false)), "127.0.0.1", true},
		{"escaped name", q("a\\.b.internal.", dns.TypeA), "127.0.0.1", false},
		{"refused source", q("alpha.internal.", dns.TypeA), "192.0.2.1", false},
		{"class CH", q("alpha.internal.", dns.TypeA, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }), "127.0.0.1", false},
		{"EDNS version 1", q("alpha.internal.", dns.TypeA, edns(1232, false), func(m *dns.Msg) { m.IsEdns0().SetVersion(1) }), "127.0.0.1", false},
		{"EDNS option", q("alpha.internal.", dns.TypeA, edns(1232, false), func(m *dns.Msg) {
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
		}), "127.0.0.1", true},
		{"two questions", q("alpha.internal.", dns.TypeA, func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) }), "127.0.0.1", false},
		{"opcode NOTIFY", q("alpha.internal.", dns.TypeA, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }), "127.0.0.1", false},
		{"AXFR", q("alpha.internal.", dns.TypeAXFR), "127.0.0.1", false},
		{"root", q(".", dns.TypeNS), "127.0.0.1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkt, err := tc.m.Pack()
			if err != nil {
				t.Fatal(err)
			}
			from := netip.MustParseAddr(tc.from)
			resp, done := s.fastAnswer(pkt, from, make([]byte, 512))
			if done != tc.done {
				t.Fatalf("answered from the bytes: %v, want %v", done, tc.done)
			}
			if !done {
				return
			}
			w := newFakeWriter(udpFrom(from))
			m := new(dns.Msg)
			if err := m.Unpack(pkt); err != nil {
				t.Fatal(err)
			}
			s.ServeDNS(w, m)
			if !bytes.Equal(resp, w.out) {
				a, b := new(dns.Msg), new(dns.Msg)
				a.Unpack(resp)
				b.Unpack(w.out)
				t.Fatalf("from the bytes:\n%v\nfrom ServeDNS:\n%v", a, b)
			}
		})
	}

	// A response is never answered.
	r := q("alpha.internal.", dns.TypeA, func(m *dns.Msg) { m.Response = true })
	pkt, _ := r.Pack()
	if resp, done := s.fastAnswer(pkt, netip.MustParseAddr("127.0.0.1"), nil); !done || resp != nil {
		t.Errorf("a response: answer %x, done %v; want none", resp, done)
	}
}
