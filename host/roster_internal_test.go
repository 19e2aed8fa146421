package host

import (
	"testing"
	"time"
)

// TestAskDrawnWithinTheWindow: the moment a host asks for a roster whose
// base it lacks is drawn within the window the delta gives, spread over
// it (a fleet asking at once is what the window prevents), kept once
// drawn, and now when there is no window.
func TestAskDrawnWithinTheWindow(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Second
	var lo, hi time.Duration = window, 0
	for range 200 {
		a := &Agent{}
		before := time.Now()
		a.planAsk(window)
		d := a.askAt.Sub(before)
		if d < 0 || d > window+time.Second {
			t.Fatalf("drawn %s from now, want within %s", d, window)
		}
		lo, hi = min(lo, d), max(hi, d)
		drawn := a.askAt
		if a.planAsk(time.Hour); !a.askAt.Equal(drawn) {
			t.Fatal("a second delta drew the moment again")
		}
	}
	if hi-lo < window/2 {
		t.Fatalf("200 draws all within %s to %s of a %s window: not spread", lo, hi, window)
	}
	a := &Agent{}
	a.planAsk(0)
	if time.Until(a.askAt) > 0 {
		t.Fatal("with no window, the ask is not now")
	}
}
