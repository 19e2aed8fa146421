package mesh

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
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

// TestHeartbeatsResendWhatExpired: a batch of heartbeats, weighed against
// the heads of the nodes' last declarations read at once, re-sends the
// declaration of the node that has not applied it and whose copy expired,
// and only that one.
func TestHeartbeatsResendWhatExpired(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "10.0.0.2", NKey: "Ubeta", Joined: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	sent := map[string]uint64{}
	for _, n := range []string{"alpha", "beta"} {
		seq, _, err := c.sender.send(ctx, n, content{resources: []spec.Resource{resource("/" + n)}}, resendAll)
		if err != nil {
			t.Fatal(err)
		}
		sent[n] = seq
	}
	clk.Add(spec.DefaultExpiry + time.Minute)
	// alpha applied nothing; beta applied what it was sent.
	for n, applied := range map[string]uint64{"alpha": 0, "beta": sent["beta"]} {
		hb := spec.Heartbeat{Node: n, AppliedSeq: applied, Protocol: spec.Protocol, HostVersion: "v"}
		if err := c.nc.Publish(spec.NodeSubject(n, spec.KindHeartbeat), mustJSON(t, hb)); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 10*time.Second, "alpha's expired declaration is sent again", func() error {
		d, err := db.LastDeclaration(ctx, "alpha")
		if err == nil && d.Seq == sent["alpha"]+1 {
			return nil
		}
		return fmt.Errorf("last %d, %v", d.Seq, err)
	})
	poll.Until(t, 10*time.Second, "beta's heartbeat is recorded", func() error {
		n, err := db.Node(ctx, "beta")
		if err == nil && n.AppliedSeq == sent["beta"] {
			return nil
		}
		return fmt.Errorf("applied %d, %v", n.AppliedSeq, err)
	})
	if d, err := db.LastDeclaration(ctx, "beta"); err != nil || d.Seq != sent["beta"] {
		t.Errorf("beta, which applied its declaration, was sent %d (%v)", d.Seq, err)
	}
}

// TestHeartbeatsHandAMissedDeclarationAgain: a node heard not to apply
// its last declaration (the stream's one republish lost on a route) is
// handed it again as recorded, once it is redeliverAfter old, and then
// not before as long again; a node that applied it is handed nothing.
func TestHeartbeatsHandAMissedDeclarationAgain(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	seq, _, err := c.sender.send(ctx, "alpha", content{resources: []spec.Resource{resource("/alpha")}}, resendAll)
	if err != nil {
		t.Fatal(err)
	}
	// Subscribed after the send: the republish was missed.
	handed, err := c.nc.SubscribeSync(spec.DeclarationDelivery("alpha"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	beat := func(applied uint64) {
		t.Helper()
		at := clk.Now()
		hb := spec.Heartbeat{Node: "alpha", Time: at, AppliedSeq: applied, Protocol: spec.Protocol, HostVersion: "v"}
		if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindHeartbeat), mustJSON(t, hb)); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "the heartbeat is recorded", func() error {
			n, err := db.Node(ctx, "alpha")
			if err == nil && !n.LastHeard.Before(at) && n.AppliedSeq == applied {
				return nil
			}
			return fmt.Errorf("%+v, %v", n, err)
		})
	}
	pending := func() int {
		t.Helper()
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n, _, err := handed.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	clk.Add(time.Second)
	beat(0)
	if n := pending(); n != 0 {
		t.Fatalf("handed %d declarations 1 s after the send, want none yet", n)
	}
	clk.Add(redeliverAfter)
	beat(0)
	m, err := handed.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("not handed its declaration again: %v", err)
	}
	d, err := db.LastDeclaration(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data, d.Body) || m.Header.Get(spec.SigHeader) != base64.StdEncoding.EncodeToString(d.Sig) || d.Seq != seq {
		t.Fatalf("handed %s, want declaration %d as recorded and signed", m.Data, seq)
	}
	clk.Add(time.Second)
	beat(0)
	clk.Add(redeliverAfter)
	beat(seq)
	if n := pending(); n != 0 {
		t.Fatalf("handed %d more declarations: one just handed again, then applied", n)
	}
}

// TestHeartbeatsAnnounceAMissedRosterAgain: a host heard to hold an older
// roster than the one in force 15 s after that was first heard has the
// roster in force announced again on RosterDelivery, without a base, so
// that it asks for it whole; then not again within 15 s; the stream
// keeps one message of it.
func TestHeartbeatsAnnounceAMissedRosterAgain(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	meshOf(t, c, db)
	ctx := context.Background()
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastRosterSeq(ctx)
	if err != nil || last == 0 {
		t.Fatalf("no roster in force after a push: %d, %v", last, err)
	}
	announced, err := c.nc.SubscribeSync(spec.RosterDelivery)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	beat := func(roster uint64) {
		t.Helper()
		at := clk.Now()
		hb := spec.Heartbeat{Node: "beta", Time: at, RosterSeq: roster, Protocol: spec.Protocol, HostVersion: "v"}
		if err := c.nc.Publish(spec.NodeSubject("beta", spec.KindHeartbeat), mustJSON(t, hb)); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "the heartbeat is recorded", func() error {
			n, err := db.Node(ctx, "beta")
			if err == nil && !n.LastHeard.Before(at) && n.RosterSeq == roster {
				return nil
			}
			return fmt.Errorf("%+v, %v", n, err)
		})
	}
	pending := func() int {
		t.Helper()
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n, _, err := announced.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	beat(last - 1)
	clk.Add(redeliverAfter - time.Second)
	beat(last - 1)
	if n := pending(); n != 0 {
		t.Fatalf("announced %d times before the lag was 15 s old", n)
	}
	// The lag is timed from when a batch saw it, which may be after the
	// clock moved on: past 15 s whichever of the two beats that was.
	clk.Add(redeliverAfter + time.Second)
	beat(last - 1)
	m, err := announced.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the roster in force was not announced again: %v", err)
	}
	var delta spec.RosterDelta
	if err := json.Unmarshal(m.Data, &delta); err != nil || delta.Seq != last || delta.Base != 0 || m.Header.Get(spec.RosterDeltaHeader) == "" {
		t.Fatalf("announced %s (%v): want roster %d without a base", m.Data, err, last)
	}
	clk.Add(time.Second)
	beat(last - 1)
	beat(last)
	if n := pending(); n != 0 {
		t.Fatalf("announced %d more times within 15 s", n)
	}
	if got := onSubject(t, c, spec.RosterSubject); got != 1 {
		t.Fatalf("the stream holds %d roster messages, want the one push's", got)
	}
}
