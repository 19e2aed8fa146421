package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go/jetstream"
)

// A push sends nothing to a node whose last declaration holds what it
// would send: no new sequence, nothing on the stream, the node's line says
// unchanged with the sequence that holds it. --force sends anyway, a change
// sends, and a declaration the node never applied and that expired is sent
// again (the host would refuse the old one). A roster change is one roster
// message and no declaration to a host that takes roster messages; a host
// of the protocol before them is sent its declaration with the roster
// inside.
func TestPushSendsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	beat := func(applied uint64, protocol int) func() {
		return func() {
			if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: applied, Protocol: protocol}, clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	record := func(r spec.Report) func() {
		return func() {
			r.Node, r.Time = "alpha", clk.Now()
			c.reports.recordReports(ctx, []queuedReport{{r: r, at: clk.Now()}})
		}
	}
	report := func(seq uint64, outcome string) func() {
		return record(spec.Report{Seq: seq, Results: []spec.ResourceResult{{Name: "x", Kind: "file", Outcome: outcome}}})
	}
	refused := func(seq uint64) func() { return record(spec.Report{Seq: seq, Refused: "expired"}) }
	push := func(force bool) (spec.PushNode, *spec.PushRoster) {
		t.Helper()
		res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}, Force: force})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Nodes) != 1 || res.Nodes[0].Error != "" {
			t.Fatalf("push: %+v", res.Nodes)
		}
		return res.Nodes[0], res.Roster
	}
	var rosters uint64
	for _, step := range []struct {
		name      string
		before    func()
		force     bool
		seq       uint64
		unchanged bool
		decls     uint64 // alpha's declarations on the stream
		rosters   uint64 // roster messages on the stream
	}{
		{"first push sends", nil, false, 1, false, 1, 1},
		{"same content is not sent", nil, false, 1, true, 1, 1},
		{"force sends", nil, true, 2, false, 2, 1},
		{"applied and same: not sent", beat(2, spec.Protocol), false, 2, true, 2, 1},
		{"a roster change is a roster message alone", func() {
			if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "127.0.0.9", NKey: "Ubeta", Joined: clk.Now()}); err != nil {
				t.Fatal(err)
			}
		}, false, 2, true, 2, 2},
		{"another roster change: a roster message alone again", func() {
			if err := db.AddNode(ctx, store.Node{Name: "gamma", Address: "127.0.0.10", NKey: "Ugamma", Joined: clk.Now()}); err != nil {
				t.Fatal(err)
			}
		}, false, 2, true, 2, 3},
		{"force sends again", nil, true, 3, false, 3, 3},
		{"unapplied and expired: sent again, the roster signed again", func() { clk.Add(spec.DefaultExpiry + time.Minute) }, false, 4, false, 4, 4},
		{"its apply failed: a push sends again", report(4, spec.Failed), false, 5, false, 5, 4},
		{"refused: a push sends again", refused(5), false, 6, false, 6, 4},
		{"applied at last: not sent", report(6, spec.Changed), false, 6, true, 6, 4},
	} {
		if step.before != nil {
			step.before()
		}
		got, roster := push(step.force)
		if got.Seq != step.seq || got.Unchanged != step.unchanged {
			t.Fatalf("%s: seq %d unchanged %v, want seq %d unchanged %v", step.name, got.Seq, got.Unchanged, step.seq, step.unchanged)
		}
		// The push says the roster it sent, and only when it sent one.
		if sent := step.rosters > rosters; (roster != nil) != sent || sent && roster.Seq != step.rosters {
			t.Fatalf("%s: the push says roster %+v, want one sent: %v (roster %d)", step.name, roster, sent, step.rosters)
		}
		rosters = step.rosters
		if n := onSubject(t, c, spec.DeclarationSubject("alpha")); n != step.decls {
			t.Fatalf("%s: %d declarations on the stream, want %d", step.name, n, step.decls)
		}
		if n := onSubject(t, c, spec.RosterSubject); n != step.rosters {
			t.Fatalf("%s: %d roster messages on the stream, want %d", step.name, n, step.rosters)
		}
		d := lastOnStream(t, c, "alpha")
		r, err := db.LastRoster(ctx)
		if err != nil || d.RosterRef == nil || d.RosterRef.Seq > r.Seq {
			t.Fatalf("%s: declaration names roster %+v, the roster in force is %d (%v)", step.name, d.RosterRef, r.Seq, err)
		}
	}
}

// onSubject counts the messages the declaration stream holds on subject.
func onSubject(t *testing.T, c *Controller, subject string) uint64 {
	t.Helper()
	s, err := c.js.Stream(context.Background(), spec.DeclarationStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subject]
}
