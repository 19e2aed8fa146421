package host_test

import (
	"context"
	"encoding/base64"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// republishRosters makes the bench's stream and alpha's consumer what a
// controller of protocol 5 makes them: the stream republishes each roster
// message on spec.RosterDelivery, and the consumer filters alpha's
// declarations alone.
func (b *bench) republishRosters() {
	b.t.Helper()
	ctx := context.Background()
	if _, err := b.js.UpdateStream(ctx, jetstream.StreamConfig{Name: spec.DeclarationStream, Subjects: []string{spec.DeclarationSubject("*"), spec.RosterSubject},
		MaxMsgSize: 4 << 20, RePublish: &jetstream.RePublish{Source: spec.RosterSubject, Destination: spec.RosterDelivery}}); err != nil {
		b.t.Fatal(err)
	}
	if err := b.js.DeleteConsumer(ctx, spec.DeclarationStream, "alpha"); err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.js.CreateOrUpdatePushConsumer(ctx, spec.DeclarationStream, jetstream.ConsumerConfig{Durable: "alpha",
		DeliverSubject: spec.DeliverySubject("alpha"), FilterSubject: spec.DeclarationSubject("alpha"), AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		b.t.Fatal(err)
	}
}

// TestRostersFromTheRepublish: with no consumer delivering roster
// messages, a host takes them from the stream's republish (a whole roster,
// then a delta on it); one published while it was stopped reaches nobody
// again, so the host asks, when it connects, for the roster in force,
// naming the one it holds, and takes the answer. (The controller's answer
// to a host that holds the roster in force: TestRosterRequestAnsweredOnly-
// UnderTheNodesInbox.)
func TestRostersFromTheRepublish(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.republishRosters()
	names := runResolver(t, resolver.Zone{})
	b.names = names
	r1 := rosterDoc(1, "10.1.0.1")
	raw1 := encodeRoster(t, r1)
	r2 := rosterDoc(2, "10.1.0.2")
	raw2 := encodeRoster(t, r2)
	r3 := rosterDoc(3, "10.1.0.3")
	raw3 := encodeRoster(t, r3)
	inForce := make(chan []byte, 1)
	checks := make(chan spec.RosterRequest, 16)
	b.answerRosterRequests(true, func(req spec.RosterRequest) []byte {
		checks <- req
		select {
		case raw := <-inForce:
			return raw
		default:
			return nil
		}
	})
	b.start()
	if req := <-checks; req.Want != 0 || req.Have != 0 || req.HaveDigest != "" {
		t.Fatalf("a host holding no roster checked with %+v, want nothing named", req)
	}

	b.publishRoster(raw1, nil)
	servesWeb(t, names, "10.1.0.1")
	b.publishDelta(b.deltaTo(r1, raw1, r2), nil)
	servesWeb(t, names, "10.1.0.2")
	if seq := keptRosterSeq(t, b); seq != 2 {
		t.Fatalf("kept roster %d, want 2", seq)
	}

	b.stop()
	b.publishDelta(b.deltaTo(r2, raw2, r3), nil)
	inForce <- raw3
	b.start()
	if req := <-checks; req.Want != 0 || req.Have != 2 || req.HaveDigest != spec.ContentDigest(raw2) {
		t.Fatalf("a host holding roster 2 checked with %+v, want roster 2 named", req)
	}
	servesWeb(t, names, "10.1.0.3")
	if seq := keptRosterSeq(t, b); seq != 3 {
		t.Fatalf("kept roster %d after the check, want 3", seq)
	}
}

// republishAll makes the bench's stream and alpha what a controller of
// protocol 6 makes them: the stream republishes every message under
// spec.Republished, and alpha has no consumer. The test's controller
// answers alpha's declaration requests from the stream, as the
// controller does; each request is sent on asked once it is answered.
func (b *bench) republishAll(asked chan<- spec.DeclarationRequest) {
	b.t.Helper()
	ctx := context.Background()
	stream, err := b.js.UpdateStream(ctx, jetstream.StreamConfig{Name: spec.DeclarationStream, Subjects: []string{spec.DeclarationSubject("*"), spec.RosterSubject},
		MaxMsgSize: 4 << 20, AllowDirect: true, RePublish: &jetstream.RePublish{Source: ">", Destination: spec.Republished(">")}})
	if err != nil {
		b.t.Fatal(err)
	}
	if err := b.js.DeleteConsumer(ctx, spec.DeclarationStream, "alpha"); err != nil {
		b.t.Fatal(err)
	}
	sub, err := b.nc.Subscribe(spec.NodeSubject("alpha", spec.KindDeclaration), func(m *nats.Msg) {
		var req spec.DeclarationRequest
		if err := spec.Decode(m.Data, &req); err != nil {
			b.t.Errorf("declaration request: %v", err)
		}
		// Told once answered: a test that publishes after it hears the
		// ask must not have its publish read into this answer (CI's load
		// once let the start's ask answer with declaration 1 itself).
		defer func() { asked <- req }()
		last, err := stream.GetLastMsgForSubject(context.Background(), spec.DeclarationSubject("alpha"))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			m.Respond(spec.EncodeReply(nil, &spec.ReplyError{Kind: spec.ReplyNotFound, Message: "nothing sent yet"}))
		case err != nil:
			m.Respond(spec.EncodeReply(nil, err))
		case req.Have == spec.ContentDigest(last.Data):
			m.Respond(spec.EncodeReply(spec.DeclarationReply{Held: true}, nil))
		default:
			sig, _ := base64.StdEncoding.DecodeString(last.Header.Get(spec.SigHeader))
			m.Respond(spec.EncodeReply(spec.DeclarationReply{Body: last.Data, Sig: sig}, nil))
		}
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { sub.Unsubscribe() })
	if err := b.nc.Flush(); err != nil {
		b.t.Fatal(err)
	}
}

// TestDeclarationsFromTheRepublish: with no consumer, a host takes its
// declarations from the stream's republish; one published while it was
// stopped reaches nobody again, so the host asks, when it connects, for
// its node's last declaration, naming the one it holds, and applies the
// answer; one it could not keep (state.json not written) is asked for
// again by its own timer, then kept and applied, not dropped as a
// duplicate of itself.
func TestDeclarationsFromTheRepublish(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	asked := make(chan spec.DeclarationRequest, 16)
	b.republishAll(asked)
	var writes *atomic.Int64
	var failed atomic.Bool
	b.prepare = func(a *host.Agent) {
		writes = host.CountStateWrites(a, func(n int64) error {
			if n == 1 && !failed.Swap(true) {
				return errors.New("no space left on device")
			}
			return nil
		})
	}
	b.start()
	if req := <-asked; req.Have != "" {
		t.Fatalf("a host holding no declaration asked naming %q", req.Have)
	}
	d1 := encode(t, b.declaration(1, fileResource("/one", "1")))
	b.publish(d1, nil)
	if r := b.report(); r.Seq != 1 || r.Refused != "" || !b.exists("/one") {
		t.Fatalf("declaration 1, not kept at first, then asked for again: report %+v", r)
	}
	if req := <-asked; req.Have != "" {
		t.Fatalf("a host that could not keep declaration 1 asked again naming %q, want none held", req.Have)
	}
	if n := writes.Load(); n != 3 {
		t.Fatalf("%d state.json writes, want 3 (the one that failed, the keeping, the record)", n)
	}

	b.stop()
	b.publish(encode(t, b.declaration(2, fileResource("/two", "2"))), nil)
	b.start()
	if req := <-asked; req.Have != spec.ContentDigest(d1) {
		t.Fatalf("a host holding declaration 1 asked naming %q, want its digest", req.Have)
	}
	r := b.report()
	if r.Reconcile && r.Seq == 1 {
		r = b.report() // the start's pass over what it kept
	}
	if r.Seq != 2 || r.Refused != "" || !b.exists("/two") {
		t.Fatalf("declaration 2, published while the host was stopped: report %+v", r)
	}
	if st, _, err := host.ReadState(b.hostDir); err != nil || st.Seq != 2 {
		t.Fatalf("kept %d (%v), want 2", st.Seq, err)
	}
}
