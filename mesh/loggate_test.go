package mesh

import (
	"testing"
	"time"
)

// TestLogGate: one line a key per interval; the ones held back are counted
// and told with the next line let through; keys do not share a budget.
func TestLogGate(t *testing.T) {
	g := logGate{every: 10 * time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		key      string
		at       time.Duration
		ok       bool
		heldBack int
	}{
		{"node/beta", 0, true, 0},
		{"node/beta", time.Second, false, 0},
		{"node/beta", 2 * time.Second, false, 0},
		{"node/gamma", 2 * time.Second, true, 0}, // another node's own budget
		{"node/beta", 9 * time.Second, false, 0},
		{"node/beta", 10 * time.Second, true, 3},
		{"node/beta", 21 * time.Second, true, 0},
	}
	for i, s := range steps {
		ok, held := g.allow(s.key, t0.Add(s.at))
		if ok != s.ok || held != s.heldBack {
			t.Fatalf("step %d (%s at %s): allow %v, held back %d; want %v, %d", i, s.key, s.at, ok, held, s.ok, s.heldBack)
		}
	}
}
