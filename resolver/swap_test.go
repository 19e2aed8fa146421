package resolver

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/miekg/dns"
)

// The two generations the swap tests alternate between.
var (
	zoneA = Zone{Names: map[string][]netip.Addr{
		"x.internal": addrs("10.0.0.1"),
		"y.internal": addrs("10.0.0.1"),
		"z.internal": addrs("10.0.0.1", "10.0.1.1"),
	}}
	zoneB = Zone{Names: map[string][]netip.Addr{
		"x.internal": addrs("10.0.0.2"),
		"y.internal": addrs("10.0.0.2"),
		"z.internal": addrs("10.0.0.2", "10.0.1.2"),
	}}
	wantGen = map[string][2]string{ // name -> generation A's answer, B's
		"x.internal.": {"[10.0.0.1]", "[10.0.0.2]"},
		"y.internal.": {"[10.0.0.1]", "[10.0.0.2]"},
		"z.internal.": {"[10.0.0.1 10.0.1.1]", "[10.0.0.2 10.0.1.2]"},
	}
)

// generation says which zone an answer came from: 0 (A), 1 (B), -1 (a mix,
// or neither).
func generation(name string, m *dns.Msg) int {
	got := fmt.Sprint(answerAddrs(m))
	w := wantGen[name]
	switch {
	case m.Rcode != dns.RcodeSuccess:
		return -1
	case got == w[0]:
		return 0
	case got == w[1]:
		return 1
	}
	return -1
}

// TestSwapUnderQueries: several clients query over UDP and TCP while the
// zone flips between A and B; every answer is wholly A's or wholly B's, and
// both are seen. Run with -race. It runs until both zones answered and
// enough queries and swaps went through (queriesUnderSwaps,
// swapsUnderQueries), not for a set time: on
// a machine as loaded as CI's, 2 s once saw 6 answers, all A's.
func TestSwapUnderQueries(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	s, addr := start(t, Config{Upstreams: []string{up.addr}}, zoneA)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var seen [2]atomic.Int64
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			if i%2 == 0 {
				s.SetZone(zoneB)
			} else {
				s.SetZone(zoneA)
			}
			swaps.Add(1)
			// The pace of the swaps under test, not a wait: the queries
			// meet each zone a while.
			time.Sleep(time.Millisecond)
		}
	})
	for i := range 6 {
		network := []string{"udp", "tcp"}[i%2]
		wg.Go(func() {
			c := &dns.Client{Net: network, Timeout: 5 * time.Second}
			for j := 0; ctx.Err() == nil; j++ {
				name := []string{"x.internal.", "z.internal.", "y.internal."}[j%3]
				m := new(dns.Msg)
				m.SetQuestion(name, dns.TypeA)
				r, _, err := c.Exchange(m, addr)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("%s %s: %v", network, name, err)
					}
					return
				}
				g := generation(name, r)
				if g < 0 {
					t.Errorf("%s %s: answer %v is neither zone A's nor B's", network, name, answerAddrs(r))
					return
				}
				seen[g].Add(1)
			}
		})
	}
	poll.Until(t, 55*time.Second, "both zones' answers, enough queries and swaps", func() error {
		a, b, n := seen[0].Load(), seen[1].Load(), swaps.Load()
		if a > 0 && b > 0 && a+b >= queriesUnderSwaps && n >= swapsUnderQueries {
			return nil
		}
		return fmt.Errorf("answers from A %d, from B %d, after %d swaps", a, b, n)
	})
	cancel()
	wg.Wait()
	if seen[0].Load() == 0 || seen[1].Load() == 0 {
		t.Errorf("answers from A %d, from B %d, after %d swaps: want both", seen[0].Load(), seen[1].Load(), swaps.Load())
	}
	t.Logf("%d swaps, %d answers from A, %d from B", swaps.Load(), seen[0].Load(), seen[1].Load())
}

// queriesUnderSwaps and swapsUnderQueries are how many answers
// TestSwapUnderQueries checks at least, and how many times the zone flips
// under them at least.
const queriesUnderSwaps, swapsUnderQueries = 2000, 1000

// TestSwapHandler does the same through the handler directly, many more
// times than the network allows, and checks Zone follows.
func TestSwapHandler(t *testing.T) {
	t.Parallel()
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetZone(zoneA)
	stop := make(chan struct{})
	var swapper, wg sync.WaitGroup
	swapper.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.SetZone([]Zone{zoneB, zoneA}[i%2])
			z := s.Zone()
			if x, zz := z.Names["x.internal."], z.Names["z.internal."]; len(x) != 1 || len(zz) != 2 || x[0] != zz[0] {
				t.Errorf("Zone mixes generations: %v", z.Names)
				return
			}
		}
	})
	var seen [2]atomic.Int64
	for range 4 {
		wg.Go(func() {
			w := newFakeWriter(udpClient)
			for j := range 20000 {
				name := []string{"x.internal.", "z.internal."}[j%2]
				m := new(dns.Msg)
				m.SetQuestion(name, dns.TypeA)
				s.ServeDNS(w, m)
				r := new(dns.Msg)
				if err := r.Unpack(w.out); err != nil {
					t.Errorf("unpack: %v", err)
					return
				}
				g := generation(name, r)
				if g < 0 {
					t.Errorf("%s: answer %v is neither zone A's nor B's", name, answerAddrs(r))
					return
				}
				seen[g].Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	swapper.Wait()
	if seen[0].Load() == 0 || seen[1].Load() == 0 {
		t.Errorf("answers from A %d, from B %d: want both", seen[0].Load(), seen[1].Load())
	}
	if !slices.Equal(answerAddrsOf(s, "x.internal."), []string{"10.0.0.1"}) && !slices.Equal(answerAddrsOf(s, "x.internal."), []string{"10.0.0.2"}) {
		t.Error("final zone answers neither")
	}
}

func answerAddrsOf(s *Server, name string) []string {
	w := newFakeWriter(udpClient)
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	s.ServeDNS(w, m)
	r := new(dns.Msg)
	if r.Unpack(w.out) != nil {
		return nil
	}
	return answerAddrs(r)
}
