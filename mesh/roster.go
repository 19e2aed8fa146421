package mesh

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// rosters sign, record and publish the roster messages, and keep the
// answer to a host's roster request.
type rosters struct {
	base
	signKey ed25519.PrivateKey
	// js is the controller's JetStream, once Run connected it.
	js      func() jetstream.JetStream
	metrics *metrics
	// mu: the roster's sequence is taken under it, and kept (the answer
	// to a roster request, kept) read and written.
	mu   sync.Mutex
	kept *keptReply
}

// rosterDigest is the digest of the names a roster holds, without sequence
// and times: what a push compares with the roster in force.
func rosterDigest(r spec.Roster) (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encode the roster: %w", err)
	}
	return spec.ContentDigest(b), nil
}

// refOf is the reference a declaration gives to the roster message r.
func refOf(r store.Roster) *spec.RosterRef {
	return &spec.RosterRef{Seq: r.Seq, Digest: spec.ContentDigest(r.Body)}
}

// sendRoster makes roster the roster in force and returns the reference to
// it: the roster message in force when it holds the same names and has not
// expired (nothing is sent), or a new one, numbered after it, signed,
// recorded and published on spec.RosterSubject, which the stream
// republishes to every host: sent says so. One roster message per change,
// whatever the number of nodes. A roster whose last message expired is
// signed again under a new sequence, so a host that joins later can take
// it.
func (rs *rosters) sendRoster(ctx context.Context, roster spec.Roster) (ref *spec.RosterRef, sent bool, err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	digest, err := rosterDigest(roster)
	if err != nil {
		return nil, false, err
	}
	last, err := rs.db.LastRoster(ctx)
	var base *store.Roster
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, false, err
	case last.Content == digest && rs.now().Before(last.Expires):
		return refOf(last), false, nil
	default:
		base = &last
	}
	r, err := rs.signRoster(ctx, roster, digest, last.Seq+1, base)
	if err != nil {
		return nil, false, err
	}
	rs.log.Info("roster sent", "seq", r.Seq, "nodes", len(roster.Nodes), "routes", len(roster.Routes), "bytes", len(r.Body))
	return refOf(r), true, nil
}

// signRoster signs roster as message seq, records it as the roster in
// force and publishes it (as a delta from base, the roster in force before
// it; nil: none). Recorded, it is published whatever happens to the
// caller's context (as a declaration is). The caller holds rs.mu.
func (rs *rosters) signRoster(ctx context.Context, roster spec.Roster, digest string, seq uint64, base *store.Roster) (store.Roster, error) {
	m, err := rs.db.Mesh(ctx)
	if err != nil {
		return store.Roster{}, err
	}
	now := rs.now().UTC()
	doc := spec.RosterDoc{Mesh: m.Name, Seq: seq, Issued: now, Expires: now.Add(spec.DefaultExpiry), Protocol: spec.Protocol, Names: roster}
	body, err := json.Marshal(doc)
	if err != nil {
		return store.Roster{}, fmt.Errorf("encode roster %d: %w", seq, err)
	}
	if len(body) > spec.MaxRoster {
		return store.Roster{}, fmt.Errorf("the roster would be %s, over the %s cap, so nothing was sent (%d nodes, %d routes): every host keeps the names it has",
			kib(len(body)), kib(spec.MaxRoster), len(roster.Nodes), len(roster.Routes))
	}
	r := store.Roster{Seq: seq, Body: body, Sig: ed25519.Sign(rs.signKey, body), Content: digest, Sent: doc.Issued, Expires: doc.Expires}
	if err := rs.db.RecordRoster(ctx, r); err != nil {
		return store.Roster{}, err
	}
	if err := rs.publishRoster(context.WithoutCancel(ctx), doc, r, base); err != nil {
		return store.Roster{}, err
	}
	return r, nil
}

// rosterFetchRate is the pace, in bytes a second, at which the fleet's
// hosts that lack a roster's base are to ask for the whole roster: the
// window a delta gives them (FetchWithinMS) is the bytes they would ask
// for together over this rate, so the bus never holds a copy a host at
// once: the window grows with the fleet times the roster's size.
const rosterFetchRate = 128 << 20

// maxFetchWithin caps that window.
const maxFetchWithin = 2 * time.Minute

// publishRoster publishes roster r (doc, as recorded) on RosterSubject:
// as a delta from base (its changes; none when base is nil or they would
// not be smaller than half the roster, and hosts then ask for it whole
// within a window). Every host receives every message on the subject, so
// the delta is what the fleet receives; the whole roster goes to a host
// only when it asks.
func (rs *rosters) publishRoster(ctx context.Context, doc spec.RosterDoc, r store.Roster, base *store.Roster) error {
	nodes, err := rs.db.NodeCount(ctx)
	if err != nil {
		return fmt.Errorf("count the nodes a roster goes to: %w", err)
	}
	msg, err := rs.deltaMsg(doc, r, base, nodes)
	if err != nil {
		return err
	}
	if _, err := rs.js().PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("publish the delta of roster %d: %w", doc.Seq, err)
	}
	rs.metrics.countRoster(len(msg.Data))
	return nil
}

// deltaMsg is the signed message that announces roster r (doc, as
// recorded) on RosterSubject, a delta from base when it is smaller than
// half the roster; asking fetchers hosts fetch it whole within a window.
func (rs *rosters) deltaMsg(doc spec.RosterDoc, r store.Roster, base *store.Roster, fetchers int) (*nats.Msg, error) {
	within := time.Duration(float64(len(r.Body)) * float64(fetchers) / rosterFetchRate * float64(time.Second))
	delta := spec.RosterDelta{Mesh: doc.Mesh, Seq: doc.Seq, Issued: doc.Issued, Expires: doc.Expires, Protocol: doc.Protocol,
		FullSig: r.Sig, FetchWithinMS: min(within, maxFetchWithin).Milliseconds()}
	var body []byte
	if base != nil {
		if was, err := rosterOf(*base); err == nil {
			d := delta
			d.Base, d.BaseDigest = base.Seq, spec.ContentDigest(base.Body)
			d.SetNodes, d.DropNodes, d.SetRoutes, d.DropRoutes = spec.Changes(was, doc.Names)
			d.Overlay, d.Controllers = doc.Names.Overlay, doc.Names.Controllers
			if b, err := json.Marshal(d); err == nil && len(b) < len(r.Body)/2 {
				body = b
			}
		}
	}
	if body == nil {
		var err error
		if body, err = json.Marshal(delta); err != nil {
			return nil, fmt.Errorf("encode the delta of roster %d: %w", doc.Seq, err)
		}
	}
	msg := signedMsg(spec.RosterSubject, body, ed25519.Sign(rs.signKey, body))
	msg.Header.Set(spec.RosterDeltaHeader, "1")
	return msg, nil
}

// redeliver announces the roster in force again, without a base, on
// RosterDelivery, where every host hears it: one that holds it takes a
// duplicate, one that missed it asks for it whole at once (the window is
// one host's). Nothing is recorded or numbered anew.
func (rs *rosters) redeliver(ctx context.Context) error {
	r, err := rs.db.LastRoster(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var doc spec.RosterDoc
	if err := spec.Decode(r.Body, &doc); err != nil {
		return fmt.Errorf("read the recorded roster %d: %w", r.Seq, err)
	}
	msg, err := rs.deltaMsg(doc, r, nil, 1)
	if err != nil {
		return err
	}
	msg.Subject = spec.RosterDelivery
	if err := rs.js().Conn().PublishMsg(msg); err != nil {
		return fmt.Errorf("announce roster %d again: %w", r.Seq, err)
	}
	rs.metrics.rostersRedelivered.Add(1)
	rs.log.Info("roster announced again to hosts heard not to hold it", "seq", r.Seq)
	return nil
}

// rosterReply is the answer to a roster request: the roster message in
// force, signed again under a new sequence (same names) when it expired;
// ErrNotFound when none was sent. Encoded once per roster message and kept
// while it stays the last recorded (one small read tells): read and
// encoded for each of a large fleet's asks, it would be most of the
// controller's work.
func (rs *rosters) rosterReply(ctx context.Context) (*keptReply, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	last, err := rs.db.LastRosterSeq(ctx)
	if err != nil {
		return nil, err
	}
	if k := rs.kept; k != nil && k.seq == last && rs.now().Before(k.expires) {
		return k, nil
	}
	r, err := rs.currentRoster(ctx)
	if err != nil {
		return nil, err
	}
	rs.kept = &keptReply{seq: r.Seq, digest: spec.ContentDigest(r.Body), expires: r.Expires,
		reply:   spec.EncodeReply(spec.RosterReply{Body: r.Body, Sig: r.Sig}, nil),
		gzipped: spec.EncodeReply(spec.RosterReply{BodyGzip: spec.Gzip(r.Body), Sig: r.Sig}, nil)}
	return rs.kept, nil
}

// keptReply is a roster request's answer, encoded, for the roster message
// seq (its signed bytes' digest), which expires then.
type keptReply struct {
	seq     uint64
	digest  string
	expires time.Time
	// reply carries the body as it is, gzipped gzipped (to a host that
	// takes it so: a fifth of the bytes).
	reply, gzipped []byte
}

// heldReply is the answer to a host that holds the roster in force.
var heldReply = spec.EncodeReply(spec.RosterReply{Held: true}, nil)

// currentRoster is the roster message in force, signed again under a new
// sequence (same names) when it expired; ErrNotFound when none was sent.
// The caller holds rs.mu.
func (rs *rosters) currentRoster(ctx context.Context) (store.Roster, error) {
	last, err := rs.db.LastRoster(ctx)
	if err != nil {
		return store.Roster{}, err
	}
	if rs.now().Before(last.Expires) {
		return last, nil
	}
	var doc spec.RosterDoc
	if err := spec.Decode(last.Body, &doc); err != nil {
		return store.Roster{}, fmt.Errorf("read roster %d: %w", last.Seq, err)
	}
	r, err := rs.signRoster(ctx, doc.Names, last.Content, last.Seq+1, &last)
	if err != nil {
		return store.Roster{}, err
	}
	rs.log.Info("expired roster signed again", "was", last.Seq, "seq", r.Seq)
	return r, nil
}

// onRoster answers a node's request for the roster in force, only under the
// node's own inbox: a host holding a declaration that names a roster it
// has not got asks for it rather than wait or apply against older names,
// and a host asks each time it connects. One that holds the roster in
// force (Have, HaveDigest) is told so in a few bytes: a fleet reconnecting
// to a restarted controller is not sent the roster again.
func (c *Controller) onRoster(ctx context.Context, m *nats.Msg, who requester) {
	if !c.allowReply(m, who) {
		return
	}
	reply := func(v any, err error) { c.respond(m, who, spec.EncodeReply(v, err)) }
	var req spec.RosterRequest
	if err := spec.Decode(m.Data, &req); err != nil {
		reply(nil, callerError(fmt.Sprintf("malformed roster request: %v", err)))
		return
	}
	if p, refused := c.refused.of(who.name); refused {
		reply(nil, refusal(p))
		return
	}
	kept, err := c.rosters.rosterReply(ctx)
	if errors.Is(err, store.ErrNotFound) {
		reply(nil, notFoundError("no roster was sent yet: the next mesh push sends one"))
		return
	}
	if err != nil {
		c.log.Error("roster request not answered", "node", who.name, "err", err)
		reply(nil, err)
		return
	}
	if kept.seq < req.Want {
		c.log.Warn("a node asks for a roster above the one in force", "node", who.name, "want", req.Want, "seq", kept.seq)
	}
	if req.Have == kept.seq && req.HaveDigest == kept.digest {
		c.respond(m, who, heldReply)
		return
	}
	if req.Gzip {
		c.respond(m, who, kept.gzipped)
		return
	}
	c.respond(m, who, kept.reply)
}

// publishRecordedRoster publishes the roster in force again when the
// stream does not hold it: a controller stopped between recording it and
// publishing it. The bytes are the ones recorded, so a host that has it
// takes it as a duplicate.
func (rs *rosters) publishRecordedRoster(ctx context.Context) error {
	r, err := rs.db.LastRoster(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	stream, err := rs.js().Stream(ctx, spec.DeclarationStream)
	if err != nil {
		return fmt.Errorf("read stream %s: %w", spec.DeclarationStream, err)
	}
	held, err := stream.GetLastMsgForSubject(ctx, spec.RosterSubject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return fmt.Errorf("read the last roster in the stream: %w", err)
	default:
		var claim struct {
			Seq   uint64 `json:"roster_seq"`
			Delta uint64 `json:"delta_seq"`
		}
		if json.Unmarshal(held.Data, &claim) == nil && max(claim.Seq, claim.Delta) >= r.Seq {
			return nil
		}
	}
	var doc spec.RosterDoc
	if err := spec.Decode(r.Body, &doc); err != nil {
		return fmt.Errorf("read the recorded roster %d: %w", r.Seq, err)
	}
	// No base: the hosts ask for it whole, each within the window.
	if err := rs.publishRoster(ctx, doc, r, nil); err != nil {
		return err
	}
	rs.log.Info("roster recorded but not published before a stop: published now", "seq", r.Seq)
	return nil
}

// contentNow is what node n is sent of g now: its resources, the CA chain
// and the reference to the roster in force, sent first when it changed
// (see sendRoster). A roster that cannot be sent is an error: nothing that
// would name it is sent.
func (rs *rosters) contentNow(ctx context.Context, n store.Node, g gathered, roster func() (*spec.RosterRef, error)) (content, error) {
	ref, err := roster()
	if err != nil {
		return content{}, fmt.Errorf("send the roster: %w", err)
	}
	return contentFor(g.plans[n.Name].Resources, g, ref), nil
}

// rosterOnce is sendRoster of g's roster, called once however many nodes
// ask: each call encodes and hashes the whole roster and reads the last
// one recorded, so a call a node made sending to every node O(N^2).
func (rs *rosters) rosterOnce(ctx context.Context, g gathered) func() (*spec.RosterRef, error) {
	var ref *spec.RosterRef
	var err error
	done := false
	return func() (*spec.RosterRef, error) {
		if !done {
			ref, _, err = rs.sendRoster(ctx, g.roster)
			done = true
		}
		return ref, err
	}
}

// sendNames composes the mesh's roster and sends it if it changed, as a
// push does before any declaration, for a change of the names that needs
// no declaration (a node removed): what it sent, nil when the roster in
// force holds the same names. A composition that fails sends nothing.
func (c *Controller) sendNames(ctx context.Context) (*spec.PushRoster, error) {
	g, err := c.composer.gather(ctx)
	if err != nil {
		return nil, fmt.Errorf("compose the mesh: %w", err)
	}
	ref, sent, err := c.rosters.sendRoster(ctx, g.roster)
	if err != nil || !sent {
		return nil, err
	}
	return &spec.PushRoster{Seq: ref.Seq, Nodes: len(g.roster.Nodes)}, nil
}

// rosterOf is the roster recorded as r.
func rosterOf(r store.Roster) (spec.Roster, error) {
	var doc spec.RosterDoc
	if err := spec.Decode(r.Body, &doc); err != nil {
		return spec.Roster{}, fmt.Errorf("read roster %d: %w", r.Seq, err)
	}
	return doc.Names, nil
}

// rosterPending is the roster in force (the zero one when none was sent),
// and whether roster differs from it (by the digest of its names), so a
// push would send it; before any roster was sent, whether it holds a
// route. A read that fails is an error, never "nothing pending".
func (rs *rosters) rosterPending(ctx context.Context, roster spec.Roster) (store.Roster, bool, error) {
	last, err := rs.db.LastRoster(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return store.Roster{}, len(roster.Routes) > 0, nil
	}
	if err != nil {
		return store.Roster{}, false, err
	}
	digest, err := rosterDigest(roster)
	if err != nil {
		return store.Roster{}, false, err
	}
	return last, digest != last.Content, nil
}

// rosterGrace is how long after a roster is sent a host's heartbeat may
// still name the one before: it takes the roster and says so in a
// heartbeat at once, and one sent meanwhile is on its way.
const rosterGrace = 10 * time.Second

// rosterBehind says whether n's host, heard well after the roster in force
// was sent, said it holds an older one; a host that has not said (not
// heard since it took one) is not behind.
func rosterBehind(n store.Node, inForce store.Roster) bool {
	return n.RosterSeq > 0 && n.RosterSeq < inForce.Seq &&
		n.LastHeard.After(inForce.Sent.Add(rosterGrace))
}
