package resolver

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/miekg/dns"
)

// dupHeld is a copy of h's sockets, as a launcher keeps one or hands one to
// its child.
func dupHeld(t *testing.T, h Held) Held {
	t.Helper()
	uf, err := h.UDP.(*net.UDPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer uf.Close()
	tf, err := h.TCP.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	pc, err := net.FilePacketConn(uf)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.FileListener(tf)
	if err != nil {
		t.Fatal(err)
	}
	return Held{Addr: h.Addr, Allow: h.Allow, UDP: pc, TCP: l}
}

// TestNoQueryFailsAcrossHandOvers: queriers ask every 5 ms over UDP and
// TCP, at the Listen address (held as a launcher holds it) and at an
// address Attach bound, while five times one resolver stops and the next
// starts with the sockets the one before handed over (HandOver), as a
// launcher's children do: not one query fails or is refused, the
// attached address's allowed prefix goes with it, and the next resolver
// owns the sockets once the launcher's copies are closed.
func TestNoQueryFailsAcrossHandOvers(t *testing.T) {
	t.Parallel()
	pc, l, err := Bind("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	main := Held{Addr: pc.LocalAddr().String(), UDP: pc, TCP: l}
	defer closeHeld([]Held{main})

	var mu sync.Mutex
	var kept []Held // what the launcher holds between two resolvers
	handOver := func(hs []Held) {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range hs {
			kept = append(kept, dupHeld(t, h))
		}
	}
	run := func(held []Held) (*Server, func() error) {
		return runServer(t, Config{Listen: []string{main.Addr}, AllowLoopback: boolp(false), Held: held, HandOver: handOver}, nil)
	}
	s, stop := run([]Held{dupHeld(t, main)})
	at := attach(t, s, "127.0.0.1:0", netip.MustParsePrefix("127.0.0.0/8"))

	quit := make(chan struct{})
	var wg sync.WaitGroup
	var sent, asked, failed atomic.Int64 // asked: sent and answered or failed
	failures := make(chan string, 1000)
	for _, addr := range []string{main.Addr, at} {
		for _, network := range []string{"udp", "tcp"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &dns.Client{Net: network, Timeout: 3 * time.Second}
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-quit:
						return
					case <-tick.C:
					}
					m := new(dns.Msg)
					m.SetQuestion("alpha.internal.", dns.TypeA)
					sent.Add(1)
					r, _, err := c.Exchange(m, addr)
					asked.Add(1)
					if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
						failed.Add(1)
						select {
						case failures <- fmt.Sprintf("%s %s: %v %v", network, addr, err, r):
						default:
						}
					}
				}
			}()
		}
	}
	for range 5 {
		before := asked.Load()
		poll.Until(t, 10*time.Second, "40 more queries answered", func() error {
			if asked.Load() >= before+40 {
				return nil
			}
			return fmt.Errorf("%d answered", asked.Load()-before)
		})
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		// Neither serves: every querier waits on a query the next must
		// answer. (Not on one sent after stop returned: a query sent
		// while the one before shut down waits as well, and its querier
		// sends no other until it is answered.)
		poll.Until(t, 10*time.Second, "the 4 queriers waiting on queries sent while no resolver serves", func() error {
			if sent.Load()-asked.Load() == 4 {
				return nil
			}
			return fmt.Errorf("%d waiting", sent.Load()-asked.Load())
		})
		mu.Lock()
		handed := kept
		kept = nil
		mu.Unlock()
		if len(handed) != 1 || handed[0].Addr != at || handed[0].Allow != netip.MustParsePrefix("127.0.0.0/8") {
			t.Fatalf("handed over %v, want %s with 127.0.0.0/8", handed, at)
		}
		next := []Held{dupHeld(t, main)}
		for _, h := range handed {
			next = append(next, dupHeld(t, h))
		}
		closeHeld(handed) // the launcher's copies, once the next has its own
		s, stop = run(next)
		if got := s.Addrs(); len(got) != 2 || got[1] != at {
			t.Fatalf("the next resolver serves %v, want %s then %s", got, main.Addr, at)
		}
	}
	before := asked.Load()
	poll.Until(t, 10*time.Second, "40 more queries answered", func() error {
		if asked.Load() >= before+40 {
			return nil
		}
		return fmt.Errorf("%d answered", asked.Load()-before)
	})
	close(quit)
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Errorf("a query failed across a hand-over: %s", f)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d queries failed across 5 hand-overs", n, asked.Load())
	}
	t.Logf("%d queries across 5 hand-overs", asked.Load())
}
