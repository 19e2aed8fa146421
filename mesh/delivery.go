package mesh

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ensureStream creates (or updates) the stream that carries declarations
// and roster messages: one subject per node, a few kept per node, every
// write synced, and room for maxNodes consumers set on the stream itself
// (no host has one; nats-server refuses to change the limit of a stream
// made with it, so it stays). Each message, once stored, is republished under
// spec.Republished: a node's declarations on its DeclarationDelivery,
// which its host alone may subscribe to, the roster messages on
// RosterDelivery, to every host. One copy a host, no consumer a node
// (some 37 KiB and a goroutine each in nats-server), no consumer scanning
// the stream. The controller reads a node's last declaration by a direct
// get (AllowDirect) when its host asks. An existing stream takes the
// limit and the republish at the controller's next start, and replicas,
// the servers that keep it.
func ensureStream(ctx context.Context, js jetstream.JetStream, maxNodes, replicas int) error {
	replicas, err := keptReplicas(ctx, js, spec.DeclarationStream, replicas)
	if err != nil {
		return err
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              spec.DeclarationStream,
		Subjects:          []string{spec.DeclarationSubject("*"), spec.RosterSubject},
		Storage:           jetstream.FileStorage,
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 8, // per node, and 8 roster messages
		MaxMsgSize:        max(spec.MaxDeclaration, spec.MaxRoster) + 4096,
		Discard:           jetstream.DiscardOld,
		MaxConsumers:      maxNodes,
		Replicas:          replicas,
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
func (s *sender) publishRecorded(ctx context.Context, n store.Node) error {
	d, err := s.db.LastDeclaration(ctx, n.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if n.AppliedSeq >= d.Seq {
		return nil
	}
	stream, err := s.js().Stream(ctx, spec.DeclarationStream)
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
	if _, err := s.js().PublishMsg(ctx, signedMsg(spec.DeclarationSubject(n.Name), d.Body, d.Sig)); err != nil {
		return fmt.Errorf("publish the recorded declaration %d of node %q: %w", d.Seq, n.Name, err)
	}
	s.metrics.countSent(len(d.Body))
	s.log.Info("declaration recorded but not published before a stop: published now", "node", n.Name, "seq", d.Seq)
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
