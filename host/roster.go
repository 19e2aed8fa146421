package host

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"sort"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// heldRoster is the roster message the host keeps (state.Roster), decoded
// once, on receipt or at start, with its signed bytes and their digest
// (what a declaration's roster_ref names).
type heldRoster struct {
	doc    spec.RosterDoc
	raw    []byte
	digest string
}

// keptRoster is what a roster message is judged against.
type keptRoster struct {
	mesh string
	seq  uint64
	raw  []byte
}

func (a *Agent) keptRoster() keptRoster {
	k := keptRoster{mesh: a.state.Mesh}
	if a.roster != nil {
		k.seq, k.raw = a.roster.doc.Seq, a.roster.raw
	}
	return k
}

// openRoster checks what needs no kept state, in this order: the size cap,
// the signature over the raw bytes, and only then decodes them strictly,
// once. A refusal returns the reason.
func openRoster(raw, sig []byte, key ed25519.PublicKey) (spec.RosterDoc, string) {
	var doc spec.RosterDoc
	if len(raw) > spec.MaxRoster {
		return doc, fmt.Sprintf("the roster is %d bytes, over the %d-byte cap", len(raw), spec.MaxRoster)
	}
	if len(sig) != ed25519.SignatureSize {
		return doc, "no valid " + spec.SigHeader + " header: the roster is unsigned"
	}
	if !ed25519.Verify(key, raw, sig) {
		return doc, "the roster's signature does not verify against the controller's key"
	}
	if err := spec.Decode(raw, &doc); err != nil {
		return doc, fmt.Sprintf("the roster does not decode: %v", err)
	}
	return doc, ""
}

// judgeRoster is what an opened roster message is to a host keeping k, by
// the rules of a declaration: another mesh's, a sequence lower than the
// one kept (a replay, or one out of order), and the kept sequence with
// other bytes are refused; the kept one again is a duplicate; then an
// expiry passed (on arrival only) or an issue time in the future are
// refused.
func judgeRoster(doc spec.RosterDoc, raw []byte, k keptRoster, now time.Time) (verdict, string) {
	switch {
	case doc.Mesh != k.mesh:
		return refuse, fmt.Sprintf("the roster is for mesh %q, not %q", doc.Mesh, k.mesh)
	case doc.Seq == 0:
		return refuse, "the roster has no sequence"
	}
	return judgeSequence("roster", "roster sequence", sequenced{doc.Seq, raw, doc.Issued, doc.Expires}, k.seq, k.raw, now)
}

// verifyRoster checks one roster message: open, then judge.
func verifyRoster(raw, sig []byte, key ed25519.PublicKey, k keptRoster, now time.Time) (spec.RosterDoc, verdict, string) {
	doc, reason := openRoster(raw, sig, key)
	if reason != "" {
		return doc, refuse, reason
	}
	v, reason := judgeRoster(doc, raw, k, now)
	return doc, v, reason
}

// takeRosters handles the roster messages of a batch: judged in sequence
// order, the highest accepted kept (one write of state.json, before any is
// acked) and its names served; a refusal is terminated and logged with its
// reason, nothing of it kept.
func (a *Agent) takeRosters(nc *nats.Conn, msgs []*nats.Msg, key ed25519.PublicKey) {
	type delivered struct {
		msg    *nats.Msg
		sig    []byte
		doc    spec.RosterDoc
		v      verdict
		reason string
	}
	ds := make([]delivered, len(msgs))
	for i, m := range msgs {
		ds[i].msg = m
		ds[i].sig, _ = base64.StdEncoding.DecodeString(m.Header.Get(spec.SigHeader))
		ds[i].doc, ds[i].reason = openRoster(m.Data, ds[i].sig, key)
		if ds[i].reason != "" {
			ds[i].v = refuse
		}
	}
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].doc.Seq < ds[j].doc.Seq })
	k := a.keptRoster()
	var take *delivered
	for i := range ds {
		d := &ds[i]
		if d.v != refuse {
			d.v, d.reason = judgeRoster(d.doc, d.msg.Data, k, time.Now())
		}
		if d.v == accept {
			take, k.seq, k.raw = d, d.doc.Seq, d.msg.Data
		}
	}
	if take != nil {
		if err := a.keepRoster(take.doc, take.msg.Data, take.sig); err != nil {
			// Not kept, so not acked: they are delivered again.
			a.log.Error("roster not kept; it will be delivered again", "roster_seq", take.doc.Seq, "err", err)
			for _, d := range ds {
				if d.v == refuse {
					a.respond(nc, d.msg, "+TERM")
				}
			}
			return
		}
	}
	for _, d := range ds {
		switch d.v {
		case refuse:
			a.log.Warn("roster refused", "roster_seq", d.doc.Seq, "reason", d.reason)
			a.respond(nc, d.msg, "+TERM")
		default:
			a.respond(nc, d.msg, "+ACK")
		}
	}
}

// keepRoster makes doc (raw, signed by sig) the roster held: written to
// state.json first, then served. A write that fails keeps nothing of it.
func (a *Agent) keepRoster(doc spec.RosterDoc, raw, sig []byte) error {
	st := a.state
	st.Roster, st.RosterSig = raw, sig
	if err := a.save(st); err != nil {
		return err
	}
	a.state.Roster, a.state.RosterSig = raw, sig
	a.roster, a.rosterErr = &heldRoster{doc: doc, raw: raw, digest: spec.ContentDigest(raw)}, nil
	a.rosterSeq.Store(doc.Seq)
	a.nudgeHeartbeat()
	a.log.Info("roster held", "roster_seq", doc.Seq, "nodes", len(doc.Names.Nodes), "routes", len(doc.Names.Routes))
	a.serveNames()
	return nil
}

// rosterFor says whether a declaration naming ref can be applied against
// the roster held: "" and false when it can (the host holds that roster or
// a later one); a refusal when the host holds that sequence with other
// bytes, or ref names nothing; wait when the host has not got it, after
// asking the controller for the roster in force.
func (a *Agent) rosterFor(ctx context.Context, nc *nats.Conn, ref spec.RosterRef, key ed25519.PublicKey) (refused string, wait bool) {
	if err := ref.Check(); err != nil {
		return err.Error(), false
	}
	if reason, ok := a.holdsRoster(ref); ok || reason != "" {
		return reason, false
	}
	if err := a.askRoster(ctx, nc, ref.Seq, key); err != nil {
		a.log.Warn("the roster a declaration names was asked for and not taken", "want", ref.Seq, "err", err)
	}
	if reason, ok := a.holdsRoster(ref); ok || reason != "" {
		return reason, false
	}
	return "", true
}

// holdsRoster says whether the roster held is ref's or a later one; a
// reason when it is ref's sequence with other bytes.
func (a *Agent) holdsRoster(ref spec.RosterRef) (string, bool) {
	switch {
	case a.roster == nil || a.roster.doc.Seq < ref.Seq:
		return "", false
	case a.roster.doc.Seq > ref.Seq:
		return "", true
	case a.roster.digest != ref.Digest:
		return fmt.Sprintf("the declaration names roster %d as %s, the host holds roster %d as %s", ref.Seq, ref.Digest, a.roster.doc.Seq, a.roster.digest), false
	}
	return "", true
}

// askRoster asks the controller for the roster in force, on the node's own
// subject (answered under its own inbox), and takes it as one from the
// stream: the same refusals.
func (a *Agent) askRoster(ctx context.Context, nc *nats.Conn, want uint64, key ed25519.PublicKey) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var reply spec.RosterReply
	if err := request(ctx, nc, spec.NodeSubject(a.state.Node, spec.KindRoster), spec.RosterRequest{Want: want}, &reply); err != nil {
		return err
	}
	doc, v, reason := verifyRoster(reply.Body, reply.Sig, key, a.keptRoster(), time.Now())
	switch v {
	case refuse:
		return fmt.Errorf("the controller's roster is refused: %s", reason)
	case duplicate:
		return nil
	}
	return a.keepRoster(doc, reply.Body, reply.Sig)
}
