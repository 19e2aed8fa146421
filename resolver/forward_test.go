package resolver

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/miekg/dns"
)

// TestForwardCachedAndExpired: an answer is cached (the second query is not
// forwarded), its TTL counts down, and it expires by its TTL.
func TestForwardCachedAndExpired(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(2))
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, testZone)

	r := ask(t, "udp", addr, "www.example.com.", dns.TypeA, 0)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 2 || r.Authoritative || !r.RecursionAvailable {
		t.Fatalf("first answer %v (AA %v, RA %v), want 192.0.2.1 TTL 2, not authoritative", r.Answer, r.Authoritative, r.RecursionAvailable)
	}
	if n := up.count(); n != 1 {
		t.Fatalf("upstream asked %d times, want 1", n)
	}
	for _, network := range []string{"udp", "tcp"} {
		if r := ask(t, network, addr, "WWW.example.com.", dns.TypeA, 1232); len(r.Answer) != 1 || r.Question[0].Name != "WWW.example.com." {
			t.Fatalf("%s cached answer %v to %v", network, r.Answer, r.Question)
		}
	}
	if n := up.count(); n != 1 {
		t.Fatalf("upstream asked %d times after cached queries, want 1", n)
	}
	// The TTL handed out counts down, and the answer expires.
	poll.Until(t, 5*time.Second, "the cached TTL counted down below 2", func() error {
		r := ask(t, "udp", addr, "www.example.com.", dns.TypeA, 0)
		if len(r.Answer) == 1 && r.Answer[0].Header().Ttl < 2 {
			return nil
		}
		return fmt.Errorf("answer %v", r.Answer)
	})
	poll.Until(t, 5*time.Second, "the cached answer expired", func() error {
		ask(t, "udp", addr, "www.example.com.", dns.TypeA, 0)
		if up.count() >= 2 {
			return nil
		}
		return fmt.Errorf("upstream asked %d times", up.count())
	})
	// Another type is another entry.
	ask(t, "udp", addr, "www.example.com.", dns.TypeTXT, 0)
	if n := up.count(); n != 3 {
		t.Errorf("upstream asked %d times, want 3 (TXT is its own entry)", n)
	}
}

// TestForwardNegativeCached: NXDOMAIN and NODATA are cached for
// min(SOA TTL, SOA minimum); a negative answer without an SOA is not.
func TestForwardNegativeCached(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		name := r.Question[0].Name
		soa := &dns.SOA{Hdr: dns.RR_Header{Name: "example.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 3600},
			Ns: "ns.example.", Mbox: "h.example.", Serial: 1, Refresh: 1, Retry: 1, Expire: 1, Minttl: 2}
		switch name {
		case "gone.example.":
			m.Rcode = dns.RcodeNameError
			m.Ns = []dns.RR{soa}
		case "empty.example.":
			m.Ns = []dns.RR{soa}
		case "nosoa.example.":
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, testZone)
	tests := []struct {
		name   string
		rcode  int
		cached bool
	}{
		{"gone.example.", dns.RcodeNameError, true},
		{"empty.example.", dns.RcodeSuccess, true},
		{"nosoa.example.", dns.RcodeNameError, false},
	}
	for _, tc := range tests {
		// At once: each name's answer expires on its own, and each counts
		// the upstream's queries for its name only.
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for i := range 3 {
				r := ask(t, "udp", addr, tc.name, dns.TypeA, 0)
				if r.Rcode != tc.rcode || len(r.Answer) != 0 {
					t.Fatalf("query %d: rcode %s answer %v, want %s and none", i, dns.RcodeToString[r.Rcode], r.Answer, dns.RcodeToString[tc.rcode])
				}
				if tc.cached {
					if soa, ok := onlySOA(r.Ns); !ok || soa.Hdr.Ttl > 2 {
						t.Fatalf("query %d: authority %v, want the SOA with TTL at most its minimum 2", i, r.Ns)
					}
				}
			}
			want := 3
			if tc.cached {
				want = 1
			}
			if went := up.countOf(tc.name); went != want {
				t.Errorf("upstream asked %d times for 3 queries, want %d", went, want)
			}
			if tc.cached {
				poll.Until(t, 5*time.Second, "the negative answer expired", func() error {
					ask(t, "udp", addr, tc.name, dns.TypeA, 0)
					if up.countOf(tc.name) >= 2 {
						return nil
					}
					return fmt.Errorf("upstream asked %d times", up.countOf(tc.name))
				})
			}
		})
	}
}

// TestForwardForgedDropped: an upstream answer with the wrong ID or the
// wrong question is dropped; the real answer that follows on the same socket
// is taken, and without one the next upstream is asked or the client gets
// SERVFAIL. Nothing forged is cached.
func TestForwardForgedDropped(t *testing.T) {
	t.Parallel()
	forge := func(r *dns.Msg, how string) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(r)
		name := r.Question[0].Name
		switch how {
		case "name":
			m.Question[0].Name = "evil.example."
			name = "evil.example."
		case "type":
			m.Question[0].Qtype = dns.TypeMX
		case "id":
			m.Id = r.Id + 1
		case "class":
			m.Question[0].Qclass = dns.ClassCHAOS
		}
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(203, 0, 113, 66)}}
		return m
	}
	good := func(r *dns.Msg) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(192, 0, 2, 1)}}
		return m
	}
	// The forging upstream: for "<how>-then-good.example." a forged answer,
	// then the real one; for "<how>-only.example." the forged one only.
	forger := startUpstream(t, func(w dns.ResponseWriter, r *dns.Msg) {
		how, rest, _ := strings.Cut(r.Question[0].Name, "-")
		w.WriteMsg(forge(r, how))
		if strings.HasPrefix(rest, "then") {
			w.WriteMsg(good(r))
		}
	})
	honest := startUpstream(t, func(w dns.ResponseWriter, r *dns.Msg) { w.WriteMsg(good(r)) })

	tests := []struct {
		name      string
		upstreams []string
		rcode     int
	}{
		{"name-then-good.example.", []string{forger.addr}, dns.RcodeSuccess},
		{"type-then-good.example.", []string{forger.addr}, dns.RcodeSuccess},
		{"id-then-good.example.", []string{forger.addr}, dns.RcodeSuccess},
		{"class-then-good.example.", []string{forger.addr}, dns.RcodeSuccess},
		{"name-only.example.", []string{forger.addr}, dns.RcodeServerFailure},
		{"type-only.example.", []string{forger.addr}, dns.RcodeServerFailure},
		{"id-only.example.", []string{forger.addr}, dns.RcodeServerFailure},
		{"class-only.example.", []string{forger.addr}, dns.RcodeServerFailure},
		{"name-only.example.", []string{forger.addr, honest.addr}, dns.RcodeSuccess},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.name, len(tc.upstreams)), func(t *testing.T) {
			t.Parallel() // a resolver of its own
			// A generous timeout: on a loaded machine the good answer that follows a
			// forged one can come late, and "then-good" would read as a failure.
			_, addr := start(t, Config{Upstreams: tc.upstreams, Timeout: 2 * time.Second}, testZone)
			for range 2 { // the second would come from the cache if the first were cached
				r := ask(t, "udp", addr, tc.name, dns.TypeA, 0)
				if r.Rcode != tc.rcode {
					t.Fatalf("rcode %s, want %s (answer %v)", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode], r.Answer)
				}
				for _, a := range answerAddrs(r) {
					if a != "192.0.2.1" {
						t.Fatalf("forged address %s reached the client", a)
					}
				}
				if tc.rcode == dns.RcodeSuccess && len(r.Answer) != 1 {
					t.Fatalf("answer %v, want the real one", r.Answer)
				}
			}
		})
	}
}

// TestForwardRandomIDsAndPorts: each upstream query has its own ID, not the
// client's, and its own source port.
func TestForwardRandomIDsAndPorts(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, testZone)
	const n = 32
	for i := range n {
		m := new(dns.Msg)
		m.SetQuestion(fmt.Sprintf("n%d.example.", i), dns.TypeA)
		m.Id = 4242
		exchange(t, "udp", addr, m)
	}
	ids, ports := map[uint16]bool{}, map[int]bool{}
	for _, q := range up.queries() {
		ids[q.id] = true
		ports[q.port] = true
	}
	if len(up.queries()) != n {
		t.Fatalf("upstream saw %d queries with IDs %v", len(up.queries()), ids)
	}
	// 32 draws from 65,536 IDs: a repeat is unlikely (p < 1%), a handful
	// would mean IDs are not random.
	if len(ids) < n-2 {
		t.Errorf("%d distinct IDs in %d queries", len(ids), n)
	}
	if len(ports) < n-2 {
		t.Errorf("%d distinct source ports in %d queries", len(ports), n)
	}
}

// TestForwardTruncatedRetriedOverTCP: an upstream UDP answer with TC set is
// asked again over TCP, and the client gets the full answer.
func TestForwardTruncatedRetriedOverTCP(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
			m.Truncated = true
		} else {
			for i := range 50 {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300}, A: net.IPv4(192, 0, 2, byte(i))})
			}
		}
		w.WriteMsg(m)
	})
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, testZone)
	r := ask(t, "tcp", addr, "big.example.", dns.TypeA, 0)
	if len(r.Answer) != 50 || r.Truncated {
		t.Fatalf("answer of %d records, TC %v; want 50", len(r.Answer), r.Truncated)
	}
	var nets []string
	for _, q := range up.queries() {
		nets = append(nets, q.net)
	}
	if fmt.Sprint(nets) != "[udp tcp]" {
		t.Errorf("upstream asked over %v, want udp then tcp", nets)
	}
	// A UDP client with no EDNS gets the cached answer cut to 512 bytes.
	q := new(dns.Msg)
	q.SetQuestion("big.example.", dns.TypeA)
	r, size := askUDPRaw(t, addr, q)
	if !r.Truncated || size > 512 || len(r.Answer) == 0 {
		t.Errorf("UDP answer: TC %v, %d bytes, %d records", r.Truncated, size, len(r.Answer))
	}
}

// TestForwardCoalesced: identical queries in flight together go upstream
// once.
func TestForwardCoalesced(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := startUpstream(t, func(w dns.ResponseWriter, r *dns.Msg) {
		<-release
		answerA(300)(w, r)
	})
	s, addr := start(t, Config{Upstreams: []string{up.addr}}, testZone)
	var wg sync.WaitGroup
	const n = 8
	for range n {
		wg.Go(func() {
			m := new(dns.Msg)
			m.SetQuestion("slow.example.", dns.TypeA)
			r, _, err := (&dns.Client{Timeout: 10 * time.Second}).Exchange(m, addr)
			if err != nil || len(r.Answer) != 1 {
				t.Errorf("answer %v, err %v", r, err)
			}
		})
	}
	poll.Until(t, 5*time.Second, "a query reached the upstream", func() error {
		if up.count() >= 1 {
			return nil
		}
		return errors.New("none did")
	})
	// Wait until the other n-1 wait on the one in flight.
	poll.Until(t, 5*time.Second, "every query waits on the one in flight", func() error {
		s.fwd.mu.Lock()
		defer s.fwd.mu.Unlock()
		c := s.fwd.inflight["slow.example.\x00\x01\x00\x01\x00"]
		if len(s.fwd.inflight) == 1 && c != nil && c.waiters == n-1 {
			return nil
		}
		return fmt.Errorf("%d in flight", len(s.fwd.inflight))
	})
	close(release)
	wg.Wait()
	if c := up.count(); c != 1 {
		t.Errorf("upstream asked %d times for %d identical queries, want 1", c, n)
	}
}

// TestCacheBounded: the cache holds at most its size, evicts unreferenced
// and expired entries first, and keeps one that is being hit.
func TestCacheBounded(t *testing.T) {
	t.Parallel()
	now := time.Now()
	sec := &sections{}
	tests := []struct {
		name string
		run  func(c *cache) // on a cache of 3
		keep []string
		drop []string
	}{
		{"over size", func(c *cache) {
			for i := range 10 {
				c.put(fmt.Sprint(i), sec, now, time.Hour)
			}
		}, []string{"9"}, []string{"0", "1", "2", "3", "4", "5", "6"}},
		{"hit survives", func(c *cache) {
			c.put("a", sec, now, time.Hour)
			c.put("b", sec, now, time.Hour)
			c.put("c", sec, now, time.Hour)
			for _, k := range []string{"d", "e", "f", "g"} {
				c.get([]byte("a"), now)
				c.put(k, sec, now, time.Hour)
			}
		}, []string{"a", "g"}, []string{"b", "c", "d"}},
		{"expired first", func(c *cache) {
			c.put("a", sec, now, time.Hour)
			c.put("b", sec, now, time.Second)
			c.put("c", sec, now, time.Hour)
			c.get([]byte("a"), now)
			c.get([]byte("b"), now)
			c.get([]byte("c"), now)
			c.put("d", sec, now.Add(2*time.Second), time.Hour)
		}, []string{"a", "c", "d"}, []string{"b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(3)
			tc.run(c)
			if c.len() > 3 || len(c.ring) > 3 {
				t.Fatalf("cache holds %d (ring %d), size 3", c.len(), len(c.ring))
			}
			for _, k := range tc.keep {
				if _, _, ok := c.get([]byte(k), now); !ok {
					t.Errorf("%s evicted", k)
				}
			}
			for _, k := range tc.drop {
				if _, _, ok := c.get([]byte(k), now); ok {
					t.Errorf("%s kept", k)
				}
			}
		})
	}
	// Through the server: CacheSize bounds it.
	up := startUpstream(t, answerA(300))
	s, addr := start(t, Config{Upstreams: []string{up.addr}, CacheSize: 4}, testZone)
	for i := range 20 {
		ask(t, "udp", addr, fmt.Sprintf("n%d.example.", i), dns.TypeA, 0)
	}
	if n := s.fwd.cache.len(); n != 4 {
		t.Errorf("cache holds %d after 20 names, want CacheSize 4", n)
	}
}
