package mesh

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// Heartbeats are coalesced per node and written in batches: the handler
// only decodes, checks and keeps the latest of each node, and one loop
// writes what it holds in one transaction. A node that sends as fast as it
// can then costs one row a batch, and delays no other node's: drained one
// transaction a heartbeat, a flood would hold the healthy nodes' behind it
// until status called them silent.
const (
	// beatBatchGap is the least time between two batches: under a flood,
	// at most 1/beatBatchGap transactions a second.
	beatBatchGap = 100 * time.Millisecond
	// floodWindow and floodBeats: a node that sends more than floodBeats
	// heartbeats in a floodWindow sends faster than any host does (one an
	// interval, 500 ms the shortest a test uses, plus one after each
	// delivery), and is named in status until floodShownFor after its last
	// window over the bound.
	floodWindow   = 10 * time.Second
	floodBeats    = 100
	floodShownFor = time.Minute
)

// beats holds the latest heartbeat of each node not yet written, and
// counts each node's heartbeats per window.
type beats struct {
	mu     sync.Mutex
	latest map[string]spec.Heartbeat
	wake   chan struct{}

	windows map[string]*beatWindow
}

// beatWindow is one node's count in the current window, and the last
// window it sent too many in.
type beatWindow struct {
	start    time.Time
	count    int
	floodAt  time.Time // end of the last window over the bound
	floodMax int       // its count
}

func newBeats() *beats {
	return &beats{latest: map[string]spec.Heartbeat{}, wake: make(chan struct{}, 1), windows: map[string]*beatWindow{}}
}

// add keeps hb as its node's latest and counts it; excess says whether it
// is over its node's bound for the window.
func (b *beats) add(hb spec.Heartbeat, now time.Time) (excess bool) {
	b.mu.Lock()
	b.latest[hb.Node] = hb
	w := b.windows[hb.Node]
	if w == nil {
		w = &beatWindow{start: now}
		b.windows[hb.Node] = w
	}
	if now.Sub(w.start) >= floodWindow {
		w.start, w.count = now, 0
	}
	w.count++
	if w.count > floodBeats {
		excess = true
		w.floodAt, w.floodMax = w.start.Add(floodWindow), w.count
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
	return excess
}

// take returns the heartbeats held, by node name, and holds none.
func (b *beats) take() []spec.Heartbeat {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]spec.Heartbeat, 0, len(b.latest))
	for _, hb := range b.latest {
		out = append(out, hb)
	}
	clear(b.latest)
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// flooding says what status shows of node's rate, if it sent too fast
// within floodShownFor.
func (b *beats) flooding(node string, now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.windows[node]
	if w == nil || w.floodMax == 0 || now.Sub(w.floodAt) > floodShownFor {
		return ""
	}
	return fmt.Sprintf("sent %d heartbeats within %s, more than the %d any host sends: each is counted (mesh_heartbeats_excess_total) and only its latest is written; its host is broken or not a mesh host",
		w.floodMax, floodWindow, floodBeats)
}

// forget drops node's counts (a node removed).
func (b *beats) forget(node string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.latest, node)
	delete(b.windows, node)
}

// beatLine writes the held heartbeats in batches, weighing each node's
// claim, and has what expired unapplied re-sent.
type beatLine struct {
	base
	beats  *beats
	claims *claimBook
	// resend re-sends a node's last declaration if it expired unapplied.
	resend func(ctx context.Context, hb spec.Heartbeat) error
}

// writeBeats writes the held heartbeats, a batch at a time, until ctx ends.
func (bl *beatLine) writeBeats(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-bl.beats.wake:
		}
		bl.writeBatch(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(beatBatchGap):
		}
	}
}

// writeBatch writes the heartbeats held now in one transaction, then
// re-sends what expired to the nodes that need it.
func (bl *beatLine) writeBatch(ctx context.Context) {
	defer bl.guard.catch("heartbeat batch", nil)
	held := bl.beats.take()
	if len(held) == 0 {
		return
	}
	// The heads of every node's last declaration, in one read: each
	// heartbeat's claim is weighed against it, and only a node whose
	// declaration expired unapplied has its body read (resendIfExpired).
	nodes := make([]string, 0, len(held))
	for _, hb := range held {
		nodes = append(nodes, hb.Node)
	}
	heads, err := bl.db.DeclarationHeads(ctx, nodes)
	if err != nil {
		bl.log.Error("heartbeats not recorded", "nodes", len(held), "err", err)
		return
	}
	kept := make([]spec.Heartbeat, 0, len(held))
	for _, hb := range held {
		hb, err := bl.claims.believe(ctx, hb, heads[hb.Node].Seq)
		if err != nil {
			bl.log.Error("heartbeat not recorded", "node", hb.Node, "err", err)
			continue
		}
		kept = append(kept, hb)
	}
	failed, err := bl.db.RecordHeartbeats(ctx, kept, bl.now())
	if err != nil {
		bl.log.Error("heartbeats not recorded", "nodes", len(kept), "err", err)
		return
	}
	for _, hb := range kept {
		if err := failed[hb.Node]; err != nil {
			bl.log.Warn("heartbeat not recorded", "node", hb.Node, "err", err)
			continue
		}
		if d := heads[hb.Node]; d.Seq == 0 || hb.AppliedSeq >= d.Seq || bl.now().Before(d.Expires) {
			continue // nothing sent, applied, or not expired: as resendIfExpired finds
		}
		if err := bl.resend(ctx, hb); err != nil {
			bl.log.Error("expired declaration not re-sent", "node", hb.Node, "err", err)
		}
	}
}
