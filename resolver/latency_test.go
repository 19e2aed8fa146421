package resolver

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/miekg/dns"
)

// latencies is an Observer that keeps what it is given.
type latencies struct {
	mu   sync.Mutex
	seen []float64
}

func (l *latencies) Observe(v float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, v)
}

func (l *latencies) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

// TestLatencyObservesEveryAnswer: each query answered is observed once,
// in seconds, whichever way it is answered: UDP from the packet's bytes (a
// mesh name, then a forwarded name the cache holds), UDP through ServeDNS
// (a forwarded name the cache does not hold), and TCP.
func TestLatencyObservesEveryAnswer(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	lat := &latencies{}
	_, addr := start(t, Config{Upstreams: []string{up.addr}, Latency: lat}, testZone)
	for i, q := range []struct{ network, name string }{
		{"udp", "alpha.internal."},
		{"udp", "example.org."},
		{"udp", "example.org."},
		{"tcp", "alpha.internal."},
		{"tcp", "example.com."},
	} {
		if r := ask(t, q.network, addr, q.name, dns.TypeA, 0); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
			t.Fatalf("%s %s: rcode %d, %d answers", q.network, q.name, r.Rcode, len(r.Answer))
		}
		poll.Until(t, 5*time.Second, fmt.Sprintf("the answer to %s over %s observed", q.name, q.network), func() error {
			n := lat.count()
			if n == i+1 {
				return nil
			}
			return fmt.Errorf("%d observed", n)
		})
	}
	lat.mu.Lock()
	defer lat.mu.Unlock()
	for _, v := range lat.seen {
		if v <= 0 || v > 5 {
			t.Errorf("a latency of %g s, want a positive time under the exchange's timeout", v)
		}
	}
}
