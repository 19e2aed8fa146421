package mesh

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ensureStream creates (or updates) the stream that carries declarations
// and roster messages: one subject per node, a few kept per node, every
// write synced, and room for maxNodes consumers (one per node of a host
// older than protocol 6) set on the stream itself: left unset, nats-server
// caps a stream at 1,000. Each message, once stored, is republished under
// spec.Republished: a node's declarations on its DeclarationDelivery,
// which its host alone may subscribe to, the roster messages on
// RosterDelivery, to every host. One copy a host, no consumer a node
// (some 37 KiB and a goroutine each in nats-server), no consumer scanning
// the stream. The controller reads a node's last declaration by a direct
// get (AllowDirect) when its host asks. An existing stream takes the
// limit and the republish at the controller's next start.
func ensureStream(ctx context.Context, js jetstream.JetStream, maxNodes int) error {
	_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              spec.DeclarationStream,
		Subjects:          []string{spec.DeclarationSubject("*"), spec.RosterSubject},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 8, // per node, and 8 roster messages
		MaxMsgSize:        max(spec.MaxDeclaration, spec.MaxRoster) + 4096,
		Discard:           jetstream.DiscardOld,
		MaxConsumers:      maxNodes,
		RePublish:         &jetstream.RePublish{Source: ">", Destination: spec.Republished(">")},
		AllowDirect:       true,
		// A push's declarations go in atomic batches: one write and one
		// sync a batch (see publish).
		AllowAtomicPublish: true,
	})
	if err != nil {
		return fmt.Errorf("create stream %s: %w", spec.DeclarationStream, err)
	}
	return nil
}

// ensureConsumer creates node's durable push consumer, as
// consumerConfig makes it for a host of protocol, or updates one made
// otherwise. Only the controller creates consumers; its delivery subject
// carries the stream and the node (invariant 8).
func ensureConsumer(ctx context.Context, js jetstream.JetStream, node string, protocol int) error {
	want := consumerConfig(node, protocol)
	_, err := js.CreateOrUpdatePushConsumer(ctx, spec.DeclarationStream, want)
	if err != nil {
		// One made before with what nats-server does not update (its
		// storage, its deliver policy, its filters) is made again.
		if c, gone := js.PushConsumer(ctx, spec.DeclarationStream, node); gone == nil {
			if have := c.CachedInfo().Config; !sameConsumer(have, want) {
				if err = deleteConsumer(ctx, js, node); err == nil {
					_, err = js.CreateOrUpdatePushConsumer(ctx, spec.DeclarationStream, want)
				}
			}
		}
	}
	if err != nil {
		return fmt.Errorf("create the delivery consumer of node %q: %w", node, err)
	}
	return nil
}

// consumerConfig is node's consumer as the controller makes it for a host
// of protocol. It filters the node's own declarations, and for a host
// older than spec.ProtocolRosterPublished the roster messages too (a
// newer one takes them from the stream's republish). With two filter
// subjects, a consumer finds its next message by reading the messages of
// every other node's subject between (nats-server's LoadNextMsgMulti: O(N)
// a consumer, O(N^2) a push, 16-18% of the controller's CPU in a push to
// 10,000 nodes); with one, from that subject's own index.
//
// Its state (what was delivered and acked) is kept in memory, not in a
// file synced at each acknowledgement: at 10,000 nodes those writes were a
// quarter of the controller's CPU during a push, and a file consumer costs
// some 6 KiB more. The bus runs in the controller's process, so the state
// is lost only when the controller stops, and its start makes every
// consumer again (ensureConsumers), each delivering from the last message
// of each subject it filters: the node's last declaration (and the last
// roster message), which a host that holds them takes for duplicates.
func consumerConfig(node string, protocol int) jetstream.ConsumerConfig {
	c := jetstream.ConsumerConfig{
		Durable:        node,
		DeliverSubject: spec.DeliverySubject(node),
		FilterSubject:  spec.DeclarationSubject(node),
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        30 * time.Second,
		MaxAckPending:  32,
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		MemoryStorage:  true,
	}
	if protocol < spec.ProtocolRosterPublished {
		c.FilterSubject, c.FilterSubjects = "", []string{spec.DeclarationSubject(node), spec.RosterSubject}
	}
	return c
}

// ensureConsumers makes the stream's consumers what nodes (the live ones)
// want, and returns the nodes that have one, with the protocol it was made
// for: a node whose host last said a protocol older than
// spec.ProtocolNoConsumer has its consumer made for that protocol; one
// whose host said a newer one, and any consumer of no live node, has none
// (deleted); a node whose host never said (joined, not heard yet) keeps
// what it has. The stream's consumers are listed once, so a start over a
// fleet whose consumers are all as wanted makes no call a node (a thousand
// nodes took some 5 s of the controller's start).
func ensureConsumers(ctx context.Context, js jetstream.JetStream, nodes []store.Node) (map[string]int, error) {
	stream, err := js.Stream(ctx, spec.DeclarationStream)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", spec.DeclarationStream, err)
	}
	held := map[string]jetstream.ConsumerConfig{}
	list := stream.ListConsumers(ctx)
	for info := range list.Info() {
		held[info.Name] = info.Config
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("list the consumers of stream %s: %w", spec.DeclarationStream, err)
	}
	made := map[string]int{}
	for _, n := range nodes {
		have, ok := held[n.Name]
		delete(held, n.Name)
		switch p := n.Protocol; {
		case p == 0:
			if ok {
				made[n.Name] = spec.ProtocolRosterPublished
			}
		case p < spec.ProtocolNoConsumer:
			if !ok || !sameConsumer(have, consumerConfig(n.Name, p)) {
				if err := ensureConsumer(ctx, js, n.Name, p); err != nil {
					return nil, err
				}
			}
			made[n.Name] = p
		case ok:
			if err := deleteConsumer(ctx, js, n.Name); err != nil {
				return nil, err
			}
		}
	}
	for name := range held {
		if err := deleteConsumer(ctx, js, name); err != nil {
			return nil, err
		}
	}
	return made, nil
}

// sameConsumer says whether have, as the server holds it, is want in each
// field the controller sets.
func sameConsumer(have, want jetstream.ConsumerConfig) bool {
	return have.Durable == want.Durable && have.DeliverSubject == want.DeliverSubject &&
		slices.Equal(filters(have), filters(want)) && have.AckPolicy == want.AckPolicy &&
		have.AckWait == want.AckWait && have.MaxAckPending == want.MaxAckPending && have.DeliverPolicy == want.DeliverPolicy &&
		have.MemoryStorage == want.MemoryStorage
}

// filters is what c filters, however it says it (nats-server may hold one
// filter in either field).
func filters(c jetstream.ConsumerConfig) []string {
	if c.FilterSubject != "" {
		return []string{c.FilterSubject}
	}
	return c.FilterSubjects
}

// deleteConsumer removes node's consumer; one already gone is no error.
func deleteConsumer(ctx context.Context, js jetstream.JetStream, node string) error {
	err := js.DeleteConsumer(ctx, spec.DeclarationStream, node)
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("delete the delivery consumer of node %q: %w", node, err)
	}
	return nil
}

// purgeDeclarations removes every declaration the stream keeps for node: a
// node removed or joined again under the name receives none of them. A
// subject with none is no error.
func purgeDeclarations(ctx context.Context, js jetstream.JetStream, node string) error {
	s, err := js.Stream(ctx, spec.DeclarationStream)
	if err == nil {
		err = s.Purge(ctx, jetstream.WithPurgeSubject(spec.DeclarationSubject(node)))
	}
	if err != nil {
		return fmt.Errorf("purge the declarations of node %q from stream %s: %w", node, spec.DeclarationStream, err)
	}
	return nil
}

// publishRecorded publishes node's last recorded declaration again when the
// stream does not hold it and the node has not applied it: a controller
// killed between recording a send and publishing it would otherwise show
// that declaration as sent, and the host would never get it. The bytes and
// the signature are the ones recorded, so a host that has it already takes
// it as a duplicate.
func (c *Controller) publishRecorded(ctx context.Context, n store.Node) error {
	d, err := c.deps.DB.LastDeclaration(ctx, n.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if n.AppliedSeq >= d.Seq {
		return nil
	}
	stream, err := c.js.Stream(ctx, spec.DeclarationStream)
	if err != nil {
		return fmt.Errorf("read stream %s: %w", spec.DeclarationStream, err)
	}
	held, err := stream.GetLastMsgForSubject(ctx, spec.DeclarationSubject(n.Name))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fmt.Errorf("read the last declaration of node %q in the stream: %w", n.Name, err)
	default:
		var claim struct {
			Seq uint64 `json:"seq"`
		}
		if json.Unmarshal(held.Data, &claim) == nil && claim.Seq >= d.Seq {
			return nil
		}
	}
	if _, err := c.js.PublishMsg(ctx, signedMsg(spec.DeclarationSubject(n.Name), d.Body, d.Sig)); err != nil {
		return fmt.Errorf("publish the recorded declaration %d of node %q: %w", d.Seq, n.Name, err)
	}
	c.metrics.countSent(len(d.Body))
	c.log.Info("declaration recorded but not published before a stop: published now", "node", n.Name, "seq", d.Seq)
	return nil
}

// signedMsg is body on subject with its signature in the Mesh-Sig header:
// a declaration or a preview as hosts receive it.
func signedMsg(subject string, body, sig []byte) *nats.Msg {
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set(spec.SigHeader, base64.StdEncoding.EncodeToString(sig))
	return msg
}

// onDeclaration answers a host's request for its node's last declaration,
// only under the node's own inbox: each host asks when it connects, since
// nothing delivers a republished declaration again. The answer is the
// stream's last message on the node's subject (a direct get), as signed;
// a host that names its digest (Have) is told it holds it, in a few bytes,
// so a fleet reconnecting to a restarted controller is sent nothing again.
func (c *Controller) onDeclaration(ctx context.Context, m *nats.Msg, who requester) {
	if !c.allowReply(m, who) {
		return
	}
	reply := func(v any, err error) { c.respond(m, who, spec.EncodeReply(v, err)) }
	var req spec.DeclarationRequest
	if err := spec.Decode(m.Data, &req); err != nil {
		reply(nil, callerError(fmt.Sprintf("malformed declaration request: %v", err)))
		return
	}
	var held *jetstream.RawStreamMsg
	err := jsCall(ctx, func(ctx context.Context) error {
		stream, err := c.declarations(ctx)
		if err != nil {
			return err
		}
		held, err = stream.GetLastMsgForSubject(ctx, spec.DeclarationSubject(who.name))
		return err
	})
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		reply(nil, notFoundError(fmt.Sprintf("nothing was sent to node %q yet: mesh push sends it its declaration", who.name)))
		return
	case err != nil:
		c.log.Error("declaration request not answered", "node", who.name, "err", err)
		reply(nil, fmt.Errorf("read the last declaration of node %q in the stream: %w", who.name, err))
		return
	}
	if req.Have != "" && req.Have == spec.ContentDigest(held.Data) {
		reply(spec.DeclarationReply{Held: true}, nil)
		return
	}
	sig, err := base64.StdEncoding.DecodeString(held.Header.Get(spec.SigHeader))
	if err != nil {
		reply(nil, fmt.Errorf("the last declaration of node %q in the stream has no signature: %w", who.name, err))
		return
	}
	reply(spec.DeclarationReply{Body: held.Data, Sig: sig}, nil)
}

// declarations is the declaration stream's handle, read once (its
// configuration says to read messages by direct get).
func (c *Controller) declarations(ctx context.Context) (jetstream.Stream, error) {
	c.streamMu.Lock()
	defer c.streamMu.Unlock()
	if c.stream != nil {
		return c.stream, nil
	}
	s, err := c.js.Stream(ctx, spec.DeclarationStream)
	if err != nil {
		return nil, fmt.Errorf("read stream %s: %w", spec.DeclarationStream, err)
	}
	c.stream = s
	return s, nil
}
