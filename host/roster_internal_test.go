package host

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestAskDrawnWithinTheWindow: the moment a host asks for a roster whose
// base it lacks is drawn within the window the delta gives from its issue,
// spread over it (a fleet asking at once is what the window prevents),
// kept once drawn, and now when there is no window or the window passed
// (a host that joins long after the delta).
func TestAskDrawnWithinTheWindow(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Second
	var lo, hi time.Duration = window, 0
	for range 200 {
		a := &Agent{}
		before := time.Now()
		a.planAsk(before, window)
		d := a.askAt.Sub(before)
		if d < 0 || d > window+time.Second {
			t.Fatalf("drawn %s from now, want within %s", d, window)
		}
		lo, hi = min(lo, d), max(hi, d)
		drawn := a.askAt
		if a.planAsk(before, time.Hour); !a.askAt.Equal(drawn) {
			t.Fatal("a second delta drew the moment again")
		}
	}
	if hi-lo < window/2 {
		t.Fatalf("200 draws all within %s to %s of a %s window: not spread", lo, hi, window)
	}
	for _, c := range []struct {
		name   string
		issued time.Time
		window time.Duration
	}{
		{"no window", time.Now(), 0},
		{"a window passed", time.Now().Add(-time.Hour), time.Minute},
	} {
		a := &Agent{}
		a.planAsk(c.issued, c.window)
		if d := time.Until(a.askAt); d > 0 || d < -time.Second {
			t.Fatalf("%s: the ask is %s from now, want now", c.name, d)
		}
	}
}

// TestAskAgainSpreadsWider: after an ask for the roster that did not bring
// it, the next is drawn within a window twice the last (from the delta's,
// at least rosterRetry, at most maxAskBackoff), from now, and set on the
// host's timer; a roster taken starts again from the delta's window. A
// fleet whose asks the controller could not answer in time then asks
// spread wider, not together again every few seconds.
func TestAskAgainSpreadsWider(t *testing.T) {
	t.Parallel()
	a := &Agent{retry: time.NewTimer(time.Hour), askWindow: 30 * time.Second}
	defer a.retry.Stop()
	for _, want := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 2 * time.Minute} {
		before := time.Now()
		a.askAgain()
		if a.askBackoff != want {
			t.Fatalf("backoff %s, want %s", a.askBackoff, want)
		}
		if d := a.askAt.Sub(before); d < 0 || d > want {
			t.Fatalf("the next ask drawn %s from now, want within %s", d, want)
		}
		if d := a.retryAt.Sub(a.askAt); d < -time.Millisecond || d > 10*time.Millisecond {
			t.Fatalf("the timer is set %s from the ask, want at it", d)
		}
		a.retryAt = time.Time{} // as retryNow does when it fires
	}
	a = &Agent{retry: time.NewTimer(time.Hour)}
	defer a.retry.Stop()
	if a.askAgain(); a.askBackoff != rosterRetry {
		t.Fatalf("with no delta's window the backoff starts at %s, want %s", a.askBackoff, rosterRetry)
	}
}

// TestRosterPoolShares: hosts sharing a pool hold one roster for each
// digest (the fleet benchmark's ten thousand hosts in one process), the
// entry goes once no host holds it, and a nil pool (every real host)
// shares nothing.
func TestRosterPoolShares(t *testing.T) {
	p := new(RosterPool)
	held := func(raw string) *heldRoster {
		return &heldRoster{raw: []byte(raw), digest: spec.ContentDigest([]byte(raw))}
	}
	a, b := p.share(held(`{"seq":1}`)), p.share(held(`{"seq":1}`))
	if a != b {
		t.Fatal("two hosts taking the same roster hold two copies")
	}
	c := p.share(held(`{"seq":2}`))
	if c == a || p.size() != 2 {
		t.Fatalf("another roster shared with the first (%v), or %d entries, want 2", c == a, p.size())
	}
	var none *RosterPool
	if x, y := none.share(held(`{"seq":1}`)), none.share(held(`{"seq":1}`)); x == y {
		t.Fatal("hosts without a pool share a roster")
	}
	runtime.KeepAlive(a)
	a, b = nil, nil
	poll.Until(t, 10*time.Second, "the pool forgets the roster no host holds", func() error {
		runtime.GC()
		if p.size() == 1 {
			return nil
		}
		return fmt.Errorf("%d entries", p.size())
	})
	if p.share(held(`{"seq":2}`)) != c {
		t.Fatal("the roster still held is not shared")
	}
}
