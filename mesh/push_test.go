package mesh

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go/jetstream"
)

func resource(path string) spec.Resource {
	return spec.Resource{Name: spec.ResourceName("m", spec.KindDirectory, path), Kind: spec.KindDirectory, Module: "m",
		Directory: &spec.DirectorySpec{Path: path, Mode: 0o755}}
}

// lastOnStream reads the last declaration of node on the stream.
func lastOnStream(t *testing.T, c *Controller, node string) spec.Declaration {
	t.Helper()
	msg, err := c.js.Stream(context.Background(), spec.DeclarationStream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := msg.GetLastMsgForSubject(context.Background(), spec.DeclarationSubject(node))
	if err != nil {
		t.Fatal(err)
	}
	var d spec.Declaration
	if err := spec.Decode(raw.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSequence: sequences rise per node, and start above what the node
// reports having applied, so a restored store never wedges a host.
func TestSequence(t *testing.T) {
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	for want := uint64(1); want <= 3; want++ {
		seq, err := c.send(ctx, "alpha", []spec.Resource{resource("/a")}, spec.Roster{})
		if err != nil || seq != want {
			t.Fatalf("send %d: seq %d, err %v", want, seq, err)
		}
	}
	// The host reports having applied 40 (the store was restored from an
	// older copy): the next is 41.
	if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: 40, Protocol: spec.Protocol}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if seq, err := c.send(ctx, "alpha", nil, spec.Roster{}); err != nil || seq != 41 {
		t.Fatalf("after a report of 40: seq %d, err %v", seq, err)
	}
	if d := lastOnStream(t, c, "alpha"); d.Seq != 41 || d.Node != "alpha" {
		t.Fatalf("on the stream: %+v", d)
	}
}

// TestExpiredIsResentAsSent: a host that returns after its pending
// declaration expired is re-sent the last sent content, re-signed under a
// new sequence, without recomposing.
func TestExpiredIsResentAsSent(t *testing.T) {
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	sent := []spec.Resource{resource("/as-sent")}
	seq, err := c.send(ctx, "alpha", sent, spec.Roster{})
	if err != nil {
		t.Fatal(err)
	}
	// What the mesh would compose now differs: nobody pushed it, so it must
	// not travel.
	mod := spec.Module{Name: "m", Version: "2", Resources: []spec.Resource{resource("/unpushed")}}
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.Assign(ctx, "m", "alpha", nil, clk.Now()); err != nil {
		t.Fatal(err)
	}
	hb := spec.Heartbeat{Node: "alpha", AppliedSeq: 0, Protocol: spec.Protocol}

	// Not expired yet: nothing is sent.
	if err := c.resendIfExpired(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if d, _ := db.LastDeclaration(ctx, "alpha"); d.Seq != seq {
		t.Fatalf("re-sent before expiry: last %d", d.Seq)
	}
	clk.Add(spec.DefaultExpiry + time.Minute)
	if err := c.resendIfExpired(ctx, hb); err != nil {
		t.Fatal(err)
	}
	d := lastOnStream(t, c, "alpha")
	if d.Seq != seq+1 || len(d.Resources) != 1 || d.Resources[0].Target() != "/as-sent" {
		t.Fatalf("re-sent %+v, want sequence %d with what was sent", d, seq+1)
	}
	if !d.Expires.After(clk.Now()) {
		t.Fatalf("re-sent declaration expires %v, already past", d.Expires)
	}
	// A host that applied it is not re-sent anything.
	hb.AppliedSeq = seq + 1
	clk.Add(spec.DefaultExpiry + time.Minute)
	if err := c.resendIfExpired(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if last, _ := db.LastDeclaration(ctx, "alpha"); last.Seq != seq+1 {
		t.Fatalf("re-sent to a host that applied it: last %d", last.Seq)
	}
}

// TestRemovedNodeLosesItsConsumer: node remove deletes the node's delivery
// consumer.
func TestRemovedNodeLosesItsConsumer(t *testing.T) {
	c, _ := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	if _, err := c.js.PushConsumer(ctx, spec.DeclarationStream, "alpha"); err != nil {
		t.Fatalf("alpha has no consumer: %v", err)
	}
	if _, err := c.removeNode(ctx, spec.NodeRemoveRequest{Name: "alpha"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.js.PushConsumer(ctx, spec.DeclarationStream, "alpha"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("after removal: %v, want the consumer gone", err)
	}
	if _, err := c.deps.DB.Node(ctx, "alpha"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("alpha still in the store: %v", err)
	}
}

// TestExpiredWatchersAreDropped: a push waiting for a node that never
// answers is forgotten once it expires.
func TestExpiredWatchersAreDropped(t *testing.T) {
	clk := &clock{now: time.Now()}
	c, _ := newController(t, clk)
	c.watch("alpha", "p1", spec.OperatorInbox+".x", false)
	c.watch("alpha", "p2", spec.OperatorInbox+".y", false)
	c.dropExpiredWatchers()
	if len(c.watchers["alpha"]) != 2 {
		t.Fatalf("dropped live watchers: %d left", len(c.watchers["alpha"]))
	}
	clk.Add(2 * time.Hour)
	c.dropExpiredWatchers()
	if len(c.watchers) != 0 {
		t.Fatalf("%d nodes still have expired watchers", len(c.watchers))
	}
}
