package mesh

import (
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestBeatsCoalesceAndNameAFlood: the latest heartbeat of each node is what
// a batch takes; a node past floodBeats in a window is excess and named
// until floodShownFor after that window; another node is not.
func TestBeatsCoalesceAndNameAFlood(t *testing.T) {
	b := newBeats()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	excess := 0
	for i := range floodBeats + 50 {
		if b.add(spec.Heartbeat{Node: "beta", AppliedSeq: uint64(i)}, t0.Add(time.Duration(i)*time.Millisecond)) {
			excess++
		}
	}
	b.add(spec.Heartbeat{Node: "alpha", AppliedSeq: 7}, t0)
	if excess != 50 {
		t.Fatalf("%d heartbeats counted as excess, want 50", excess)
	}
	held := b.take()
	if len(held) != 2 || held[0].Node != "alpha" || held[1].Node != "beta" || held[1].AppliedSeq != floodBeats+49 {
		t.Fatalf("a batch takes %+v, want alpha's and beta's latest", held)
	}
	if len(b.take()) != 0 {
		t.Fatal("a second batch took heartbeats again")
	}
	if got := b.flooding("beta", t0.Add(time.Second)); !strings.Contains(got, "sent 150 heartbeats within 10s") {
		t.Fatalf("beta's flood is shown as %q", got)
	}
	if got := b.flooding("alpha", t0.Add(time.Second)); got != "" {
		t.Fatalf("alpha is shown flooding: %q", got)
	}
	if got := b.flooding("beta", t0.Add(floodWindow+floodShownFor+time.Second)); got != "" {
		t.Fatalf("beta's flood is still shown after it ended: %q", got)
	}
	// A new window starts the count again.
	if b.add(spec.Heartbeat{Node: "beta"}, t0.Add(floodWindow+time.Second)) {
		t.Fatal("the first heartbeat of a new window is counted as excess")
	}
}
