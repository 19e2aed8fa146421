package mesh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRosterChangeIsADelta: at 200 nodes, a push that adds one route
// publishes one message on the roster subject: a delta from the roster in
// force, a small fraction of the roster's bytes, which applied to that
// roster makes the one recorded, under the signature it carries; its
// window for hosts that lack the base grows with the fleet.
func TestRosterChangeIsADelta(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	meshOf(t, c, db)
	ctx := context.Background()
	for i := range 200 {
		if err := db.AddNode(ctx, store.Node{Name: fmt.Sprintf("n%03d", i), Address: fmt.Sprintf("10.1.0.%d", i), NKey: fmt.Sprintf("Un%03d", i), Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	addRoute := func(version string, routes ...spec.Route) {
		t.Helper()
		web := spec.Module{Name: "web", Version: version, Routes: routes, Resources: []spec.Resource{resource("/srv/web")}}
		web.Resources[0].Module, web.Resources[0].Name = "web", spec.ResourceName("web", spec.KindDirectory, "/srv/web")
		if _, err := db.RegisterModules(ctx, []spec.Module{web}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	lastDelta := func() (spec.RosterDelta, *jetstream.RawStreamMsg) {
		t.Helper()
		s, err := c.js.Stream(ctx, spec.DeclarationStream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.GetLastMsgForSubject(ctx, spec.RosterSubject)
		if err != nil {
			t.Fatal(err)
		}
		var d spec.RosterDelta
		if m.Header.Get(spec.RosterDeltaHeader) == "" || spec.Decode(m.Data, &d) != nil {
			t.Fatalf("the last message on %s is no delta: %.200s", spec.RosterSubject, m.Data)
		}
		return d, m
	}
	before, err := db.LastRoster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rosters := onSubject(t, c, spec.RosterSubject)

	addRoute("2", spec.Route{Name: "web", Port: 80}, spec.Route{Name: "admin", Port: 81})
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := onSubject(t, c, spec.RosterSubject); got != rosters+1 {
		t.Fatalf("%d messages on %s after one route added, want %d", got, spec.RosterSubject, rosters+1)
	}
	after, err := db.LastRoster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d, m := lastDelta()
	if d.Seq != after.Seq || d.Base != before.Seq || d.BaseDigest != spec.ContentDigest(before.Body) {
		t.Fatalf("delta %d on base %d %s, want %d on %d %s", d.Seq, d.Base, d.BaseDigest, after.Seq, before.Seq, spec.ContentDigest(before.Body))
	}
	if len(m.Data)*10 > len(after.Body) {
		t.Fatalf("the delta is %d bytes, the roster %d: want under a tenth", len(m.Data), len(after.Body))
	}
	was, err := rosterOf(before)
	if err != nil {
		t.Fatal(err)
	}
	_, raw, err := d.Doc(was)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, after.Body) || !ed25519.Verify(c.cfg.SignKey.Public().(ed25519.PublicKey), raw, d.FullSig) {
		t.Fatalf("the delta applied to roster %d makes\n%.300s\nwant the roster recorded, under its signature\n%.300s", before.Seq, raw, after.Body)
	}
	if want := time.Duration(float64(len(after.Body)) * 203 / rosterFetchRate * float64(time.Second)); d.FetchWithin() != want.Truncate(time.Millisecond) {
		t.Errorf("window %s, want %s (the roster's bytes times the nodes over the rate)", d.FetchWithin(), want)
	}

}

// lastRosterReads counts the reads of the last roster's body.
type lastRosterReads struct {
	*store.DB
	n atomic.Int64
}

func (s *lastRosterReads) LastRoster(ctx context.Context) (store.Roster, error) {
	s.n.Add(1)
	return s.DB.LastRoster(ctx)
}

// TestRosterReplyKeptWhileInForce: the answer to a roster request is read
// and encoded once per roster message (a fleet asks for it together), and
// a roster recorded after is what the next request is answered with.
func TestRosterReplyKeptWhileInForce(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	reads := &lastRosterReads{}
	c, db := newControllerWith(t, clk, func(db *store.DB) Store { reads.DB = db; return reads })
	ctx := context.Background()
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	ask := func() spec.RosterReply {
		t.Helper()
		kept, err := c.rosters.rosterReply(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var r spec.RosterReply
		if err := spec.DecodeReply(kept.reply, &r); err != nil {
			t.Fatal(err)
		}
		var doc spec.RosterDoc
		if err := spec.Decode(r.Body, &doc); err != nil || doc.Seq != kept.seq || spec.ContentDigest(r.Body) != kept.digest {
			t.Fatalf("the answer holds roster %d (%v), said %d as %s", doc.Seq, err, kept.seq, kept.digest)
		}
		return r
	}
	first := ask()
	before := reads.n.Load()
	for range 5 {
		if r := ask(); !bytes.Equal(r.Body, first.Body) {
			t.Fatal("the kept answer changed")
		}
	}
	if n := reads.n.Load() - before; n != 0 {
		t.Fatalf("five requests for the same roster read it %d times, want 0: kept", n)
	}
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "10.0.0.2", NKey: "Ubeta", Joined: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastRoster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := ask(); !bytes.Equal(r.Body, last.Body) || bytes.Equal(r.Body, first.Body) {
		t.Fatal("after a new roster, the answer is not the new one")
	}
}

// TestSendEachSendsTheRosterOnce: sending to each of several nodes in turn
// (a roll's abort sending the reverted their declarations) makes and reads
// the roster in force once, not once a node.
func TestSendEachSendsTheRosterOnce(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	reads := &lastRosterReads{}
	c, db := newControllerWith(t, clk, func(db *store.DB) Store { reads.DB = db; return reads })
	ctx := context.Background()
	nodes := []string{"alpha"}
	for i := range 5 {
		n := fmt.Sprintf("n%d", i)
		if err := db.AddNode(ctx, store.Node{Name: n, Address: fmt.Sprintf("10.0.0.%d", i+2), NKey: "U" + n, Joined: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	before := reads.n.Load()
	for _, pn := range c.roller.sendEach(ctx, nodes) {
		if pn.Error != "" || pn.Seq == 0 {
			t.Fatalf("send to %s: %+v", pn.Node, pn)
		}
	}
	if n := reads.n.Load() - before; n != 1 {
		t.Fatalf("sending to %d nodes read the roster in force %d times, want once", len(nodes), n)
	}
}
