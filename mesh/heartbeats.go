package mesh

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
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

// Liveness is kept in memory as well as in the store: a node heard is
// heard, whether or not the store took the write. While the store refuses
// heartbeats (another writer holds it), status reads when each node was
// last heard from here, and says the store is busy, instead of calling
// heartbeating nodes silent.

// beats holds the latest heartbeat of each node not yet written, and
// counts each node's heartbeats per window.
type beats struct {
	mu     sync.Mutex
	latest map[string]spec.Heartbeat
	wake   chan struct{}

	windows map[string]*beatWindow

	// heard is when each node was last heard, and the interval its
	// heartbeat said, whether or not the store recorded it.
	heard map[string]heardBeat
	// unrecordedSince is when heartbeats' writes began to fail, and
	// unrecordedErr the last failure; zero while they are recorded.
	unrecordedSince time.Time
	unrecordedErr   error
}

// heardBeat is when a node was last heard, and how often it said it sends
// a heartbeat (zero: not said).
type heardBeat struct {
	at       time.Time
	interval time.Duration
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
	return &beats{latest: map[string]spec.Heartbeat{}, wake: make(chan struct{}, 1), windows: map[string]*beatWindow{}, heard: map[string]heardBeat{}}
}

// add keeps hb as its node's latest and counts it; excess says whether it
// is over its node's bound for the window.
func (b *beats) add(hb spec.Heartbeat, now time.Time) (excess bool) {
	b.mu.Lock()
	b.latest[hb.Node] = hb
	b.heard[hb.Node] = heardBeat{at: now, interval: time.Duration(max(hb.IntervalMS, 0)) * time.Millisecond}
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
	delete(b.heard, node)
}

// heardOf is when node was last heard, as this controller heard it
// (recorded or not); false if it was not heard since the controller
// started.
func (b *beats) heardOf(node string) (heardBeat, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.heard[node]
	return h, ok
}

// lastHeard is n with when it was last heard and how often it said it beats
// as the later of the store's record and this controller's memory, which
// holds what the store could not take. Status, node list and node show
// each read a node's liveness through it.
func (b *beats) lastHeard(n store.Node) store.Node {
	if h, ok := b.heardOf(n.Name); ok && h.at.After(n.LastHeard) {
		n.LastHeard, n.Heartbeat = h.at, h.interval
	}
	return n
}

// putBack holds again the heartbeats of held whose node sent none since,
// and wakes the writer: a batch the store refused is tried again, with
// what came since, until the store takes it.
func (b *beats) putBack(held []spec.Heartbeat) {
	b.mu.Lock()
	for _, hb := range held {
		if _, newer := b.latest[hb.Node]; !newer {
			b.latest[hb.Node] = hb
		}
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// unrecorded notes that a batch's write failed at now with err.
func (b *beats) unrecorded(now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unrecordedSince.IsZero() {
		b.unrecordedSince = now
	}
	b.unrecordedErr = err
}

// recorded notes that a batch was written.
func (b *beats) recorded() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unrecordedSince, b.unrecordedErr = time.Time{}, nil
}

// storeTrouble says what status shows while heartbeats' writes fail: the
// store busy (another writer holds it) since when, or the failure; empty
// while they are recorded.
func (b *beats) storeTrouble() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unrecordedSince.IsZero() {
		return ""
	}
	since := b.unrecordedSince.UTC().Format(time.RFC3339)
	if store.IsBusy(b.unrecordedErr) {
		return "the store is busy since " + since + ": heartbeats are not being recorded (another writer holds it); nodes are shown as this controller heard them"
	}
	return fmt.Sprintf("heartbeats are not being recorded since %s (%v); nodes are shown as this controller heard them", since, b.unrecordedErr)
}

// beatLine writes the held heartbeats in batches, weighing each node's
// claim, and has what expired unapplied re-sent.
type beatLine struct {
	base
	beats  *beats
	claims *claimBook
	// resend re-sends a node's last declaration if it expired unapplied.
	resend func(ctx context.Context, hb spec.Heartbeat) error
	// redeliver hands a node that has not applied its last declaration
	// the declaration again, as recorded; redelivered is when each node
	// was last handed one (writeBatch's goroutine alone).
	redeliver   func(ctx context.Context, hb spec.Heartbeat) error
	redelivered map[string]time.Time
	// rosterSeq is the roster in force's sequence; redeliverRoster
	// announces it again; rosterLag is what writeBatch's goroutine keeps
	// of hosts heard not to hold it.
	rosterSeq       func(ctx context.Context) (uint64, error)
	redeliverRoster func(ctx context.Context) error
	rosterLag       rosterLag
	// changed tells the status pages a batch was written.
	changed func()
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
		bl.notRecorded(held, err)
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
		bl.notRecorded(kept, err)
		return
	}
	bl.beats.recorded()
	bl.changed()
	for _, hb := range kept {
		if err := failed[hb.Node]; err != nil {
			bl.log.Warn("heartbeat not recorded", "node", hb.Node, "err", err)
			continue
		}
		d := heads[hb.Node]
		switch {
		case d.Seq == 0 || hb.AppliedSeq >= d.Seq:
			delete(bl.redelivered, hb.Node) // nothing sent, or applied
		case !bl.now().Before(d.Expires):
			if err := bl.resend(ctx, hb); err != nil {
				bl.log.Error("expired declaration not re-sent", "node", hb.Node, "err", err)
			}
		case bl.redeliverDue(hb.Node, d.Sent):
			if err := bl.redeliver(ctx, hb); err != nil {
				bl.log.Error("declaration not handed again", "node", hb.Node, "err", err)
			}
		}
	}
	bl.checkRoster(ctx, kept)
}

// rosterLag is the roster in force that hosts were heard not to hold:
// since when, and when it was last announced again for them.
type rosterLag struct {
	seq           uint64
	since, handed time.Time
}

// checkRoster announces the roster in force again when a heartbeat of
// kept says its host holds an older one redeliverAfter after that was
// first heard, and then not before as long again: like a declaration, a
// roster message the stream republished once may be lost on a route
// between controllers' servers, and a host still connected never asks.
// One announcement reaches every host, so there is one for all of them.
func (bl *beatLine) checkRoster(ctx context.Context, kept []spec.Heartbeat) {
	if bl.rosterSeq == nil || len(kept) == 0 {
		return
	}
	least := kept[0].RosterSeq
	for _, hb := range kept[1:] {
		least = min(least, hb.RosterSeq)
	}
	// A batch holds the heartbeats that came since the last: one where
	// every host holds the roster says nothing of the others.
	last, err := bl.rosterSeq(ctx)
	if err != nil || last == 0 || least >= last {
		return
	}
	now := bl.now()
	if bl.rosterLag.seq != last {
		bl.rosterLag = rosterLag{seq: last, since: now}
		return
	}
	if now.Sub(bl.rosterLag.since) < redeliverAfter || now.Sub(bl.rosterLag.handed) < redeliverAfter {
		return
	}
	bl.rosterLag.handed = now
	if err := bl.redeliverRoster(ctx); err != nil {
		bl.log.Error("roster not announced again", "seq", last, "err", err)
	}
}

// redeliverAfter is how long a node may be heard not to apply its last
// declaration before the controller hands it the declaration again, and
// then how long between two handings. The stream republishes each
// declaration once, as it stores it; with controllers past one, a route
// between two servers that drops and comes back loses what crossed it
// meanwhile, and a host still connected never asks again (it asks when
// it connects). Longer than a host takes to apply most declarations: one
// still applying takes what it is handed again as a duplicate.
const redeliverAfter = 15 * time.Second

// redeliverDue says whether node, whose last declaration was sent at
// sent, is to be handed it again now, and notes that it is.
func (bl *beatLine) redeliverDue(node string, sent time.Time) bool {
	now := bl.now()
	if now.Sub(sent) < redeliverAfter || now.Sub(bl.redelivered[node]) < redeliverAfter {
		return false
	}
	if bl.redelivered == nil {
		bl.redelivered = map[string]time.Time{}
	}
	bl.redelivered[node] = now
	return true
}

// notRecorded keeps what a batch the store refused (err) says, to be
// written with the next batch, and notes the failure for status.
func (bl *beatLine) notRecorded(held []spec.Heartbeat, err error) {
	bl.log.Error("heartbeats not recorded", "nodes", len(held), "err", err)
	bl.beats.unrecorded(bl.now(), err)
	bl.beats.putBack(held)
}
