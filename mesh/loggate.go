package mesh

import (
	"sync"
	"time"
)

// logGate lets one log line per key through each interval and counts the
// ones it holds back, so that a node sending bad requests as fast as it can
// cannot bury the controller's log (invariant 14) while every one is still
// counted in /metrics.
type logGate struct {
	every time.Duration

	mu    sync.Mutex
	last  map[string]time.Time
	muted map[string]int
}

// allow says whether a line for key may be logged at now, and how many were
// held back for key since the last one let through.
func (g *logGate) allow(key string, now time.Time) (ok bool, heldBack int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		g.last, g.muted = map[string]time.Time{}, map[string]int{}
	}
	if last, seen := g.last[key]; seen && now.Sub(last) < g.every {
		g.muted[key]++
		return false, 0
	}
	heldBack = g.muted[key]
	g.last[key] = now
	delete(g.muted, key)
	return true, heldBack
}
