package mesh

import (
	"context"
	"crypto/ed25519"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestDeclarationRequestAnswered: a host asks for its node's last
// declaration on its own subject, under its own inbox alone: none sent yet
// is not found; then it is the stream's last, as signed, and it is
// republished to the node's own delivery subject as it is stored; a host
// that names its digest is answered held, with nothing of it.
func TestDeclarationRequestAnswered(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	key := joinWithKey(t, c, "beta")
	nc, err := busConn(t, c, key, spec.NodeInbox("beta"), nil)
	if err != nil {
		t.Fatal(err)
	}
	republished := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(spec.DeclarationDelivery("beta"), republished)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ask := func(req spec.DeclarationRequest) (spec.DeclarationReply, error) {
		t.Helper()
		m, err := nc.Request(spec.NodeSubject("beta", spec.KindDeclaration), mustJSON(t, req), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r spec.DeclarationReply
		return r, spec.DecodeReply(m.Data, &r)
	}
	if _, err := ask(spec.DeclarationRequest{}); spec.KindOf(err) != spec.ReplyNotFound || !strings.Contains(err.Error(), "mesh push") {
		t.Fatalf("before any push: %v, want not found, saying what sends one", err)
	}
	ctx := context.Background()
	if _, err := c.push(ctx, spec.PushRequest{Nodes: []string{"beta"}}); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastDeclaration(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-republished:
		if string(m.Data) != string(last.Body) {
			t.Fatalf("republished %s, want the declaration sent", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the declaration sent was not republished to beta's delivery subject")
	}
	r, err := ask(spec.DeclarationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pub := c.cfg.SignKey.Public().(ed25519.PublicKey)
	if string(r.Body) != string(last.Body) || !ed25519.Verify(pub, r.Body, r.Sig) || r.Held {
		t.Fatalf("answered %+v, want the last declaration as signed", r)
	}
	if r, err := ask(spec.DeclarationRequest{Have: spec.ContentDigest(last.Body)}); err != nil || !r.Held || r.Body != nil {
		t.Fatalf("a host holding the last was answered %+v, %v; want held, no body", r, err)
	}
	if r, err := ask(spec.DeclarationRequest{Have: "sha256:other"}); err != nil || r.Held || string(r.Body) != string(last.Body) {
		t.Fatalf("a host holding another was answered %+v, %v; want the last", r, err)
	}
	body := mustJSON(t, spec.DeclarationRequest{})
	tryReflect(t, c, db, nc, spec.NodeInbox("beta"), spec.NodeSubject("beta", spec.KindDeclaration), same(foreign(spec.NodeInbox("beta")), body), body, 0)
}

// TestConsumerFollowsTheHostsProtocol: a node has a consumer only while its
// host's heartbeats say a protocol older than 6, made for that protocol
// (filtering the roster too for protocol 4), and made once, not at each
// heartbeat, nor more often than once a minute (a host whose protocol
// flips at each heartbeat does not have the bus make and delete it as
// often); a host that says 6 has its consumer deleted.
func TestConsumerFollowsTheHostsProtocol(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, _ := newController(t, clk)
	joinNode(t, c, "beta")
	ctx := context.Background()
	beat := func(protocol int) {
		t.Helper()
		c.onHeartbeat(ctx, &nats.Msg{Subject: spec.NodeSubject("beta", spec.KindHeartbeat),
			Data: mustJSON(t, spec.Heartbeat{Node: "beta", Time: time.Now().UTC(), Protocol: protocol})})
	}
	filtering := func() []string {
		t.Helper()
		cons, err := c.js.PushConsumer(ctx, spec.DeclarationStream, "beta")
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return filters(cons.CachedInfo().Config)
	}
	decl := spec.DeclarationSubject("beta")
	moved := false // the first change is made at once
	for _, step := range []struct {
		protocol int
		want     []string
	}{
		{spec.Protocol, nil},
		{spec.ProtocolRosterPublished, []string{decl}},
		{spec.ProtocolRosterDelta, []string{decl, spec.RosterSubject}},
		{spec.Protocol, nil},
	} {
		was := filtering()
		beat(step.protocol)
		if moved && !slices.Equal(was, step.want) {
			// Within the minute of the last change, nothing changes.
			if got := filtering(); !slices.Equal(got, was) {
				t.Fatalf("a heartbeat of protocol %d within a minute of the last change made beta's consumer filter %q, want %q as it was", step.protocol, got, was)
			}
			clk.Add(consumerMoveEvery)
			beat(step.protocol)
		}
		if got := filtering(); !slices.Equal(got, step.want) {
			t.Fatalf("after a heartbeat of protocol %d beta's consumer filters %q, want %q (none: no consumer)", step.protocol, got, step.want)
		}
		moved = moved || !slices.Equal(was, step.want)
	}
	// Made once: a second heartbeat of protocol 5 asks the bus nothing.
	beat(spec.ProtocolRosterPublished)
	calls, err := c.nc.SubscribeSync("$JS.API.CONSUMER.>")
	if err != nil {
		t.Fatal(err)
	}
	defer calls.Unsubscribe()
	beat(spec.ProtocolRosterPublished)
	beat(spec.ProtocolRosterPublished)
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := calls.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatalf("a heartbeat of the protocol its consumer was made for called %s", m.Subject)
	}
}
