package host

import (
	"testing"
	"time"
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
