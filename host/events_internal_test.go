package host

import (
	"context"
	"testing"
	"time"
)

// TestPaceMergesKicks: kicks that never stop make at most one pass per
// every, the first after settle, whatever their number.
func TestPaceMergesKicks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kicks, passes := make(chan struct{}, 1), make(chan struct{})
	const every = 100 * time.Millisecond
	go pace(ctx, kicks, passes, 10*time.Millisecond, every)
	began := time.Now()
	sent, got := 0, 0
	for time.Since(began) < time.Second {
		select {
		case kicks <- struct{}{}:
			sent++
		case <-passes:
			got++
		}
	}
	elapsed := time.Since(began)
	if limit := int(elapsed/every) + 1; got > limit || got == 0 {
		t.Fatalf("%d kicks in %s made %d passes, want 1 to %d", sent, elapsed, got, limit)
	}
}
