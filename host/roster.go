package host

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// heldRoster is the roster message the host keeps (RosterFile), decoded
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
// the signature over the raw bytes, the protocol, and only then decodes
// them strictly,
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
	if reason := protocolRefused(raw); reason != "" {
		return doc, reason
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

// openDelta checks a roster delta as openRoster checks a roster: the size
// cap, its own signature, the protocol, then a strict decode.
func openDelta(raw, sig []byte, key ed25519.PublicKey) (spec.RosterDelta, string) {
	var d spec.RosterDelta
	if len(raw) > spec.MaxRoster {
		return d, fmt.Sprintf("the roster delta is %d bytes, over the %d-byte cap", len(raw), spec.MaxRoster)
	}
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(key, raw, sig) {
		return d, "the roster delta's signature does not verify against the controller's key"
	}
	if reason := protocolRefused(raw); reason != "" {
		return d, reason
	}
	if err := spec.Decode(raw, &d); err != nil {
		return d, fmt.Sprintf("the roster delta does not decode: %v", err)
	}
	return d, ""
}

// rosterMsg is one message of RosterSubject in a batch: a whole roster,
// or a delta (applied to the roster held, it is one).
type rosterMsg struct {
	msg   *nats.Msg
	seq   uint64
	delta *spec.RosterDelta
	// doc, raw and sig are the roster and its signed bytes: as received,
	// or as a delta made them of its base.
	doc    spec.RosterDoc
	raw    []byte
	sig    []byte
	v      verdict
	reason string
	// fetch: a delta whose base this host does not hold; it asks for the
	// roster whole instead.
	fetch bool
}

// takeRosters handles the roster messages of a batch, in sequence order:
// a whole roster is judged as a declaration is; a delta is applied to the
// roster held when that is its base (and its signature over what it makes
// verifies), else the roster in force is asked for, at a moment drawn
// within the window the delta gives. The highest accepted is kept (one
// write of the roster) and its names served; a refusal is logged with its
// reason.
func (a *Agent) takeRosters(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg, key ed25519.PublicKey) {
	rs := make([]rosterMsg, len(msgs))
	for i, m := range msgs {
		r := &rs[i]
		r.msg = m
		sig, _ := base64.StdEncoding.DecodeString(m.Header.Get(spec.SigHeader))
		if m.Header.Get(spec.RosterDeltaHeader) != "" {
			d, reason := openDelta(m.Data, sig, key)
			r.delta, r.seq, r.reason = &d, d.Seq, reason
		} else {
			r.doc, r.reason = openRoster(m.Data, sig, key)
			r.seq, r.raw, r.sig = r.doc.Seq, m.Data, sig
		}
		if r.reason != "" {
			r.v = refuse
		}
	}
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].seq < rs[j].seq })
	k := a.keptRoster()
	cur := a.roster
	var take *rosterMsg
	var fetch []*rosterMsg
	now := time.Now()
	for i := range rs {
		r := &rs[i]
		if r.v == refuse {
			continue
		}
		if r.delta != nil {
			r.applyTo(cur, k, key, now)
			if r.fetch {
				fetch = append(fetch, r)
				continue
			}
			if r.v == refuse || r.v == duplicate {
				continue
			}
		}
		r.v, r.reason = judgeRoster(r.doc, r.raw, k, now)
		if r.v == accept {
			take, k.seq, k.raw = r, r.doc.Seq, r.raw
			cur = &heldRoster{doc: r.doc, raw: r.raw, digest: spec.ContentDigest(r.raw)}
		}
	}
	if take != nil {
		if err := a.keepRoster(nc, take.doc, take.raw, take.sig); err != nil {
			// Not kept: the roster is asked for again by the retry.
			a.log.Error("roster not kept; it will be asked for again", "roster_seq", take.doc.Seq, "err", err)
			a.askWant = max(a.askWant, take.doc.Seq)
			a.arm(rosterRetry)
			return
		}
	}
	for _, r := range rs {
		if !r.fetch && r.v == refuse {
			a.log.Warn("roster refused", "roster_seq", r.seq, "reason", r.reason)
		}
	}
	a.fetchRoster(ctx, nc, fetch, key)
}

// applyTo judges delta r against the roster held (cur, kept as k): at or
// below the sequence held it is a duplicate (it names nothing newer); on
// its base it makes the roster it announces when the signature verifies
// over that; on another base, or making what the signature does not
// verify, when not expired and not issued in the future, the roster is to
// be fetched whole.
func (r *rosterMsg) applyTo(cur *heldRoster, k keptRoster, key ed25519.PublicKey, now time.Time) {
	d := r.delta
	switch {
	case d.Mesh != k.mesh:
		r.v, r.reason = refuse, fmt.Sprintf("the roster delta is for mesh %q, not %q", d.Mesh, k.mesh)
		return
	case d.Seq == 0:
		r.v, r.reason = refuse, "the roster delta has no sequence"
		return
	case d.Seq <= k.seq:
		r.v = duplicate
		return
	}
	if cur != nil && d.Base != 0 && cur.doc.Seq == d.Base && cur.digest == d.BaseDigest {
		doc, raw, err := d.Doc(cur.doc.Names)
		if err == nil && ed25519.Verify(key, raw, d.FullSig) {
			r.doc, r.raw, r.sig = doc, raw, d.FullSig
			return
		}
		// The delta is the controller's (its own signature verified), but
		// what it makes of the base is not what the controller signed: a
		// difference in encoding, or a fault. Nothing of it is kept; the
		// roster in force is asked for, as for another base.
		r.reason = fmt.Sprintf("the roster delta %d applied to roster %d makes a roster its signature does not verify; the roster in force is asked for", d.Seq, d.Base)
	}
	if v, reason := judgeSequence("roster delta", "roster sequence", sequenced{d.Seq, nil, d.Issued, d.Expires}, 0, nil, now); v == refuse {
		r.v, r.reason = refuse, reason
		return
	}
	r.fetch = true
}

// fetchRoster asks for the roster in force for the deltas of a batch whose
// base this host does not hold, once the moment drawn for it comes: until
// the moment, and again after rosterRetry while the roster is not taken,
// the host's retry has it ask.
func (a *Agent) fetchRoster(ctx context.Context, nc *nats.Conn, fetch []*rosterMsg, key ed25519.PublicKey) {
	// A roster taken in this batch may hold what they announce already.
	var still []*rosterMsg
	for _, r := range fetch {
		if a.rosterSeq.Load() < r.seq {
			still = append(still, r)
		}
	}
	fetch = still
	if len(fetch) == 0 {
		return
	}
	for _, r := range fetch {
		if r.reason != "" && a.askAt.IsZero() {
			a.log.Warn("roster delta not applied", "roster_seq", r.seq, "reason", r.reason)
		}
	}
	last := fetch[len(fetch)-1].delta
	a.askWindow = last.FetchWithin()
	a.planAsk(last.Issued, a.askWindow)
	a.askWant = max(a.askWant, last.Seq)
	if wait := time.Until(a.askAt); wait > 0 {
		a.arm(wait)
	} else {
		a.askDueNow(ctx, nc)
	}
}

// askDueNow asks for the roster in force when a delta announced one this
// host has not taken (askWant) and the moment drawn for it came; taken, the
// declaration waiting for it is handled. Not taken, it asks again after
// rosterRetry.
func (a *Agent) askDueNow(ctx context.Context, nc *nats.Conn) {
	want := a.askWant
	if want == 0 || a.rosterSeq.Load() >= want {
		a.askWant = 0
		return
	}
	if wait := time.Until(a.askAt); wait > 0 {
		a.arm(wait)
		return
	}
	key, err := a.signKey()
	if err != nil {
		a.log.Error("rosters cannot be verified", "err", err)
		return
	}
	if err := a.askRoster(ctx, nc, want, key); err != nil {
		a.log.Warn("a roster delta's base is not held, and the roster in force was asked for and not taken", "roster_seq", want, "err", err)
	}
	if a.rosterSeq.Load() < want {
		a.askAgain()
		return
	}
	a.askWant = 0
	a.handleWaiting(ctx, nc)
}

// checkRoster asks for the roster in force, naming the one held: a host
// that connects may have missed roster messages (the stream's republish
// delivers nothing again), and one that holds the roster in force is
// answered so in a few bytes. None sent yet is no error. It says whether
// a newer roster was taken.
func (a *Agent) checkRoster(ctx context.Context, nc *nats.Conn, key ed25519.PublicKey) bool {
	before := a.rosterSeq.Load()
	err := a.askRoster(ctx, nc, 0, key)
	if spec.KindOf(err) == spec.ReplyNotFound {
		return false
	}
	if err != nil {
		a.log.Warn("the roster in force was asked for and not taken; the next roster message or declaration that names one has it asked again", "err", err)
		return false
	}
	return a.rosterSeq.Load() > before
}

// isRoster says whether m is a roster message, as the stream republishes
// it.
func isRoster(m *nats.Msg) bool { return m.Subject == spec.RosterDelivery }

// planAsk draws the moment to ask for the roster in force, within window
// from issued (the delta's issue), unless one is drawn already: the
// fleet's hosts, which all received it then, ask spread over the window,
// not at once. A moment already past is now: a host that joins long after
// a delta was issued asks at once. Taking a roster clears it.
func (a *Agent) planAsk(issued time.Time, window time.Duration) {
	if !a.askAt.IsZero() {
		return
	}
	a.askAt = issued
	if window > 0 {
		a.askAt = a.askAt.Add(rand.N(window))
	}
	if now := time.Now(); a.askAt.Before(now) {
		a.askAt = now
	}
}

// keepRoster makes doc (raw, signed by sig) the roster held: written to
// RosterFile first, then served, and its controllers' bus URLs taken for
// nc (takeControllers). A write that fails keeps nothing of it.
func (a *Agent) keepRoster(nc *nats.Conn, doc spec.RosterDoc, raw, sig []byte) error {
	if err := a.writeRoster(a.cfg.Dir, raw, sig); err != nil {
		return err
	}
	a.roster, a.rosterErr = a.cfg.Rosters.share(&heldRoster{doc: doc, raw: raw, digest: spec.ContentDigest(raw)}), nil
	a.state.Roster, a.state.RosterSig = a.roster.raw, sig
	a.rosterSeq.Store(doc.Seq)
	a.askAt, a.askBackoff = time.Time{}, 0
	a.nudgeHeartbeat()
	a.log.Info("roster held", "roster_seq", doc.Seq, "nodes", len(doc.Names.Nodes), "routes", len(doc.Names.Routes))
	a.serveNames()
	// The interface follows the roster's members before a declaration
	// that names this roster is applied: a container published on the
	// overlay's address needs it there.
	a.overlay.take(context.Background(), doc.Names)
	a.kinds.roster(doc.Names)
	a.takeControllers(nc, doc)
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
	// A delta announced it: ask at the moment drawn, not at once with the
	// whole fleet.
	if a.planAsk(time.Now(), 0); time.Until(a.askAt) > 0 {
		return "", true
	}
	if err := a.askRoster(ctx, nc, ref.Seq, key); err != nil {
		a.log.Warn("the roster a declaration names was asked for and not taken", "want", ref.Seq, "err", err)
	}
	if reason, ok := a.holdsRoster(ref); ok || reason != "" {
		return reason, false
	}
	a.askAgain()
	return "", true
}

// maxAskBackoff caps the window a host that could not take the roster in
// force draws its next ask within.
const maxAskBackoff = 2 * time.Minute

// askAgain draws the moment to ask again for the roster in force after an
// ask that did not bring it: within a window twice the last (at least the
// delta's, at least rosterRetry, at most maxAskBackoff) from now, so a
// fleet whose asks the controller could not answer in time spreads the
// next ones wider instead of asking together again: asks at a fixed
// interval from a large fleet can keep every answer from arriving in
// time.
func (a *Agent) askAgain() {
	a.askBackoff = min(max(2*a.askBackoff, a.askWindow, rosterRetry), maxAskBackoff)
	a.askAt = time.Time{}
	a.planAsk(time.Now(), a.askBackoff)
	a.arm(time.Until(a.askAt))
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

// rosterAskTimeout bounds an ask for the roster in force: long enough for
// a few hundred KB to arrive while the fleet's other hosts ask too (the
// bytes of an answer that came too late are spent for nothing).
const rosterAskTimeout = 30 * time.Second

// askRoster asks the controller for the roster in force, on the node's own
// subject (answered under its own inbox), and takes it as one from the
// stream: the same refusals.
func (a *Agent) askRoster(ctx context.Context, nc *nats.Conn, want uint64, key ed25519.PublicKey) error {
	ctx, cancel := context.WithTimeout(ctx, rosterAskTimeout)
	defer cancel()
	req := spec.RosterRequest{Want: want, Gzip: true}
	if a.roster != nil {
		req.Have, req.HaveDigest = a.roster.doc.Seq, a.roster.digest
	}
	var reply spec.RosterReply
	if err := request(ctx, nc, spec.NodeSubject(a.state.Node, spec.KindRoster), req, &reply); err != nil {
		return err
	}
	if reply.Held {
		return nil
	}
	if reply.BodyGzip != nil {
		body, err := spec.Gunzip(reply.BodyGzip, spec.MaxRoster)
		if err != nil {
			return fmt.Errorf("the controller's roster: %w", err)
		}
		reply.Body = body
	}
	doc, v, reason := verifyRoster(reply.Body, reply.Sig, key, a.keptRoster(), time.Now())
	switch v {
	case refuse:
		return fmt.Errorf("the controller's roster is refused: %s", reason)
	case duplicate:
		return nil
	}
	return a.keepRoster(nc, doc, reply.Body, reply.Sig)
}
