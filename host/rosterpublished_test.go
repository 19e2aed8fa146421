package host_test

import (
	"context"
	"testing"

	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
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
