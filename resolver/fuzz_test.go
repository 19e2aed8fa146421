package resolver

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzHandler feeds arbitrary bytes to the handler as a query: it never
// panics, an answer unpacks, its ID is the query's, and its size is bounded
// by what the client takes (512 without EDNS0 over UDP, 4096 at most).
// Forwarded names go to an upstream the test runs on loopback.
func FuzzHandler(f *testing.F) {
	up := startUpstream(f, answerA(60))
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{up.addr}, Timeout: 200 * time.Millisecond, CacheSize: 1000}, nil)
	if err != nil {
		f.Fatal(err)
	}
	many := make([]netip.Addr, 300)
	for i := range many {
		many[i] = netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)})
	}
	z := Zone{Names: map[string][]netip.Addr{"many.internal": many}}
	for n, as := range testZone.Names {
		z.Names[n] = as
	}
	s.SetZone(z)

	for _, seed := range []struct {
		name  string
		qtype uint16
		edns  uint16
	}{
		{"alpha.internal.", dns.TypeA, 0},
		{"many.internal.", dns.TypeAAAA, 0},
		{"many.internal.", dns.TypeAAAA, 4096},
		{"missing.internal.", dns.TypeMX, 1232},
		{"drive.example.org.", dns.TypeANY, 512},
		{"www.example.com.", dns.TypeA, 0},
	} {
		m := new(dns.Msg)
		m.SetQuestion(seed.name, seed.qtype)
		if seed.edns > 0 {
			m.SetEdns0(seed.edns, true)
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, false)
		f.Add(b, true)
	}
	f.Add([]byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0}, false)

	f.Fuzz(func(t *testing.T, data []byte, tcp bool) {
		// The UDP loop's answer from the bytes, checked against ServeDNS's
		// below.
		fast, done := s.fastAnswer(data, netip.MustParseAddr("127.0.0.1"), make([]byte, 512))
		if done && fast != nil && len(fast) > dns.MaxMsgSize {
			t.Fatalf("answer from the bytes is %d bytes", len(fast))
		}
		fast = append([]byte(nil), fast...)
		m := new(dns.Msg)
		if err := m.Unpack(data); err != nil {
			if done && fast != nil {
				t.Fatalf("answered from the bytes a packet that does not unpack: %x", data)
			}
			return
		}
		var from net.Addr = udpClient
		limit := dns.MinMsgSize
		if tcp {
			from, limit = tcpClient, dns.MaxMsgSize
		} else if opt := m.IsEdns0(); opt != nil {
			limit = min(max(int(opt.UDPSize()), dns.MinMsgSize), maxUDPSize)
		}
		w := newFakeWriter(from)
		s.ServeDNS(w, m)
		if done && !tcp && !sameAnswer(fast, w.out) {
			t.Fatalf("answer from the bytes %x, from ServeDNS %x", fast, w.out)
		}
		if w.writes == 0 {
			return
		}
		if w.writes > 1 {
			t.Fatalf("%d answers to one query", w.writes)
		}
		if len(w.out) > limit {
			t.Fatalf("answer is %d bytes, over %d", len(w.out), limit)
		}
		r := new(dns.Msg)
		if err := r.Unpack(w.out); err != nil {
			t.Fatalf("answer does not unpack: %v\n%x", err, w.out)
		}
		if r.Id != m.Id || !r.Response {
			t.Fatalf("answer ID %d response %v, query ID %d", r.Id, r.Response, m.Id)
		}
		if fmt.Sprint(r.Question) != fmt.Sprint(m.Question) && len(r.Question) != 0 {
			t.Fatalf("answer's question %v, asked %v", r.Question, m.Question)
		}
	})
}

// sameAnswer: a and b are the same answer, but for TTLs that a second may
// have counted down between the two.
func sameAnswer(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	ma, mb := new(dns.Msg), new(dns.Msg)
	if ma.Unpack(a) != nil || mb.Unpack(b) != nil {
		return false
	}
	for _, m := range []*dns.Msg{ma, mb} {
		for _, rrs := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
			for _, rr := range rrs {
				if rr.Header().Rrtype != dns.TypeOPT {
					rr.Header().Ttl = 0
				}
			}
		}
	}
	return ma.String() == mb.String()
}

// FuzzScrub feeds arbitrary bytes to the scrubber as an upstream's answer
// to the question it carries: it never panics, keeps no record of the
// mesh's names, no NS, no additional record, nothing in the answer owned
// by a name the question's chain does not reach, and scrubbing again
// changes nothing; what it keeps packs for the cache.
func FuzzScrub(f *testing.F) {
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:9"}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	s.SetZone(testZone)
	for _, name := range []string{"www.example.com.", "into.example.com.", "x.dn.example.com.", "gone.example.com."} {
		q := new(dns.Msg)
		q.SetQuestion(name, dns.TypeA)
		w := newFakeWriter(udpClient)
		lyingUpstream(w, q)
		f.Add(w.out)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		resp := new(dns.Msg)
		if resp.Unpack(data) != nil || len(resp.Question) != 1 {
			return
		}
		q := resp.Question[0]
		qname := lowerString(q.Name)
		scrub(resp, qname, q.Qtype, s.ownName)
		chain := map[string]bool{qname: true}
		for _, rr := range resp.Answer {
			owner := lowerString(rr.Header().Name)
			if c, ok := rr.(*dns.CNAME); ok && chain[owner] {
				chain[lowerString(c.Target)] = true
			}
			if d, ok := rr.(*dns.DNAME); ok {
				for n := range chain {
					if n != owner && under(n, owner) {
						chain[n[:len(n)-len(owner)]+lowerString(d.Target)] = true
					}
				}
				chain[owner] = true
			}
			if !chain[owner] {
				t.Fatalf("kept %s, off the chain of %s", rr, qname)
			}
		}
		for _, rrs := range [][]dns.RR{resp.Answer, resp.Ns} {
			for _, rr := range rrs {
				if s.ownName(lowerString(rr.Header().Name)) || rr.Header().Rrtype == dns.TypeNS {
					t.Fatalf("kept %s", rr)
				}
			}
		}
		if len(resp.Extra) != 0 {
			t.Fatalf("kept additional %v", resp.Extra)
		}
		before := resp.String()
		scrub(resp, qname, q.Qtype, s.ownName)
		if after := resp.String(); after != before {
			t.Fatalf("scrubbed again:\n%s\nfirst:\n%s", after, before)
		}
		answerSections(resp, q) // packs or says why not; never panics
	})
}
