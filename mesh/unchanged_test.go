package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// A push sends nothing to a node whose last declaration holds what it
// would send: no new sequence, nothing on the stream, the node's line says
// unchanged with the sequence that holds it. --force sends anyway, a change
// sends, and a declaration the node never applied and that expired is sent
// again (the host would refuse the old one).
func TestPushSendsOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	onStream := func() uint64 {
		t.Helper()
		s, err := c.js.Stream(ctx, spec.DeclarationStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	push := func(force bool) spec.PushNode {
		t.Helper()
		res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}, Force: force})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Nodes) != 1 || res.Nodes[0].Error != "" {
			t.Fatalf("push: %+v", res.Nodes)
		}
		return res.Nodes[0]
	}
	for _, step := range []struct {
		name      string
		before    func()
		force     bool
		seq       uint64
		unchanged bool
		msgs      uint64
	}{
		{"first push sends", nil, false, 1, false, 1},
		{"same content is not sent", nil, false, 1, true, 1},
		{"force sends", nil, true, 2, false, 2},
		{"applied and same: not sent", func() {
			if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: 2, Protocol: spec.Protocol}, clk.Now()); err != nil {
				t.Fatal(err)
			}
		}, false, 2, true, 2},
		{"a roster change sends", func() {
			if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "127.0.0.9", NKey: "Ubeta", Joined: clk.Now()}); err != nil {
				t.Fatal(err)
			}
		}, false, 3, false, 3},
		{"unapplied and expired: sent again", func() { clk.Add(spec.DefaultExpiry + time.Minute) }, false, 4, false, 4},
	} {
		if step.before != nil {
			step.before()
		}
		got := push(step.force)
		if got.Seq != step.seq || got.Unchanged != step.unchanged {
			t.Fatalf("%s: seq %d unchanged %v, want seq %d unchanged %v", step.name, got.Seq, got.Unchanged, step.seq, step.unchanged)
		}
		if n := onStream(); n != step.msgs {
			t.Fatalf("%s: %d declarations on the stream, want %d", step.name, n, step.msgs)
		}
	}
}
