package host

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// delivery is one declaration the stream republished to the node, or the
// controller's answer to its request: opened (verified and decoded) once,
// then judged against what is kept.
type delivery struct {
	msg     *nats.Msg
	raw     []byte
	sig     []byte
	decl    spec.Declaration
	verdict verdict
	reason  string
	// chain is the CA chain decl carries, checked (nil: none).
	chain []*x509.Certificate
	// otherProtocol: refused for its protocol, it is an upgrade's
	// (refuseProtocol).
	otherProtocol bool
}

// held is the declaration the host keeps (state.Declaration), decoded once,
// on receipt or at start, with its signed bytes and their digest: every
// pass after uses it as it is.
type held struct {
	decl   spec.Declaration
	raw    []byte
	digest string
}

func (a *Agent) signKey() (ed25519.PublicKey, error) {
	k, err := base64.StdEncoding.DecodeString(a.state.SignKey)
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the controller's signing key in the host state is not an ed25519 key")
	}
	return k, nil
}

// handleBatch opens every delivery (verifies and decodes it, once), then
// handles them by sequence: a refusal is reported with its reason; a
// duplicate is dropped; an accepted one is kept durably, applied and
// reported.
func (a *Agent) handleBatch(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg) {
	defer a.handled(msgs)
	key, err := a.signKey()
	if err != nil {
		a.log.Error("declarations cannot be verified", "err", err)
		return
	}
	// The roster messages first: a declaration of the same batch may name
	// one of them.
	var rosters, decls []*nats.Msg
	for _, m := range msgs {
		if isRoster(m) {
			rosters = append(rosters, m)
		} else {
			decls = append(decls, m)
		}
	}
	if len(rosters) > 0 {
		a.takeRosters(ctx, nc, rosters, key)
		if w := a.waiting; w != nil {
			a.waiting = nil
			decls = append(decls, w)
		}
	}
	ds := make([]delivery, len(decls))
	for i, m := range decls {
		ds[i] = delivery{msg: m, raw: m.Data}
		ds[i].decl, ds[i].reason = open(m.Data, m.Header.Get(spec.SigHeader), key, a.decode)
		if ds[i].reason != "" {
			ds[i].verdict = refuse
		}
		ds[i].otherProtocol = ds[i].reason != "" && ds[i].reason == protocolRefused(m.Data)
	}
	// Sequence order, by the sequence each one says (as far as it was
	// read: one that did not open is refused whatever it says); each is
	// judged in turn below, as the kept sequence moves.
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].decl.Seq < ds[j].decl.Seq })
	for _, d := range ds {
		if d.verdict != refuse {
			d.verdict, d.reason = judge(d.decl, d.raw, a.kept(key), time.Now())
		}
		if d.verdict == accept {
			if d.chain, d.reason = chainOf(d.decl, a.root, time.Now()); d.reason != "" {
				d.verdict = refuse
			}
		}
		if d.verdict == accept && d.decl.RosterRef != nil {
			var wait bool
			if d.reason, wait = a.rosterFor(ctx, nc, *d.decl.RosterRef, key); d.reason != "" {
				d.verdict = refuse
			} else if wait {
				// Never applied against older names: not kept; handled
				// again when a roster is taken, or when the retry is due.
				// Said once a declaration: its handlings again say nothing
				// new (invariant 14).
				a.waiting = d.msg
				a.arm(a.rosterWait())
				if a.waitSaid == d.decl.Seq {
					a.log.Debug("declaration still waits for the roster it names", "seq", d.decl.Seq, "roster_seq", d.decl.RosterRef.Seq)
					continue
				}
				a.waitSaid = d.decl.Seq
				a.log.Warn("declaration waits for the roster it names", "seq", d.decl.Seq, "roster_seq", d.decl.RosterRef.Seq)
				a.reports.send(nc, spec.Report{Seq: d.decl.Seq, Digest: spec.ContentDigest(d.raw),
					Waiting: fmt.Sprintf("it names roster %d, which this host has not got: it asked the controller for it and applies the declaration when it arrives", d.decl.RosterRef.Seq)})
				continue
			}
		}
		switch d.verdict {
		case refuse:
			a.log.Warn("declaration refused", "seq", d.decl.Seq, "reason", d.reason)
			if d.otherProtocol {
				a.refuseProtocol(ctx, nc, d)
				continue
			}
			a.reports.send(nc, spec.Report{Seq: d.decl.Seq, Digest: spec.ContentDigest(d.raw), Refused: d.reason})
		case duplicate:
			a.log.Debug("declaration delivered again", "seq", d.decl.Seq)
		case accept:
			d.sig, _ = base64.StdEncoding.DecodeString(d.msg.Header.Get(spec.SigHeader))
			if err := a.keep(d); err != nil {
				a.notKept(nc, d, err)
				continue
			}
			// The names first: they are the mesh's, whatever this node's
			// resources make of the apply.
			a.serveNames()
			a.apply(ctx, nc, a.held, false)
		}
	}
}

// handled raises handledSeq to the highest stream sequence msgs carry (the
// stream's republish sets it; an answer to a request carries none).
func (a *Agent) handled(msgs []*nats.Msg) {
	for _, m := range msgs {
		if seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64); err == nil && seq > a.handledSeq.Load() {
			a.handledSeq.Store(seq)
		}
	}
}

func (a *Agent) kept(key ed25519.PublicKey) kept {
	return kept{mesh: a.state.Mesh, node: a.state.Node, key: key, seq: a.state.Seq, raw: a.state.Declaration, root: a.root}
}

// keep makes d the kept declaration, and the CA chain it carries (if it
// carries one) the chain held. It is written to state.json, with the
// record as it stands, before it is applied (invariant 4): a crash
// from then on leaves it kept, and the next start applies it. A write that
// fails keeps nothing of it, in memory either, so its delivery again is not
// taken for a duplicate. A chain whose first intermediate is another than
// the one held has the facts sent again at once, so status sees it.
func (a *Agent) keep(d delivery) error {
	st := a.state
	st.Seq, st.Declaration, st.Signature = d.decl.Seq, d.raw, d.sig
	if d.chain != nil {
		st.CAChain = d.decl.CAChain
	}
	if err := a.save(st); err != nil {
		return err
	}
	// Field by field: other goroutines read the node's name.
	a.state.Seq, a.state.Declaration, a.state.Signature, a.state.CAChain = st.Seq, st.Declaration, st.Signature, st.CAChain
	a.held, a.heldErr = &held{decl: d.decl, raw: d.raw, digest: spec.ContentDigest(d.raw)}, nil
	if d.chain != nil {
		before := a.Intermediates()
		a.chain.Store(&d.chain)
		if len(before) == 0 || !before[0].Equal(d.chain[0]) {
			a.log.Info("the mesh's intermediate is held", "serial", ca.SerialOf(d.chain[0]), "chain", len(d.chain))
			nudge(a.factsNow)
		}
	}
	return nil
}

// notKept says that d could not be kept (err: why), and has it asked for
// again by the retry. The controller is told why, once for each
// declaration and cause: a report needs no disk, and a host whose disk is
// full is otherwise seen only not to apply.
func (a *Agent) notKept(nc *nats.Conn, d delivery, err error) {
	a.log.Error("declaration not kept; it will be asked for again", "seq", d.decl.Seq, "err", err)
	a.refetch = true
	a.arm(rosterRetry)
	said := fmt.Sprint(d.decl.Seq, err)
	if said == a.unkeptSaid {
		return
	}
	a.unkeptSaid = said
	a.reports.send(nc, spec.Report{Seq: d.decl.Seq, Digest: spec.ContentDigest(d.raw), Unkept: err.Error()})
}

// save writes st to state.json; the caller holds what it wrote.
func (a *Agent) save(st State) error {
	if err := a.writeState(a.cfg.Dir, st); err != nil {
		return err
	}
	a.savedAppliedSeq, a.recordUnsaved = st.AppliedSeq, false
	return nil
}

// apply makes the machine hold h, records what it holds and reports. The
// record is written to state.json only when it changed (or an earlier
// write of it failed): what the host applied is never lost, while an apply
// that leaves the record as it was writes nothing, and the applied sequence
// alone waits for the next write (see State.AppliedSeq). A reconcile pass
// that changed nothing logs nothing above debug and sends no report.
func (a *Agent) apply(ctx context.Context, nc *nats.Conn, h *held, reconcile bool) {
	decl := h.decl
	began := time.Now()
	p := a.engine.apply(ctx, decl.Resources, a.state.Applied)
	results, applied, writes := p.results, p.record, p.writes
	took := time.Since(began)
	told := a.watch.noteStops(results, time.Now())
	a.factsMoved(results)
	if !slices.Equal(applied, a.state.Applied) {
		a.recordUnsaved = true
	}
	a.state.Applied = applied
	a.state.AppliedSeq = decl.Seq
	a.appliedSeq.Store(decl.Seq)
	if a.recordUnsaved {
		if err := a.save(a.state); err != nil {
			a.log.Error("what was applied is not recorded; the next apply records it", "seq", decl.Seq, "err", err)
		}
	}
	// An apply cut short by the host stopping failed only because it was
	// stopped: reporting "context canceled" would leave that in status
	// until something else changed. The next start applies it again and
	// reports.
	if ctx.Err() != nil {
		a.log.Info("apply cut short by the stop; the next start applies it again", "seq", decl.Seq)
		return
	}
	if wait := a.healing.passed(p.outside, time.Now()); wait > 0 {
		a.arm(wait)
	}
	counts := map[string]int{}
	var failures strings.Builder
	for _, r := range results {
		counts[r.Outcome]++
		if r.Outcome == spec.Failed {
			fmt.Fprintf(&failures, "%s: %s\n", r.Name, r.Error)
		}
	}
	changed := counts[spec.Created] + counts[spec.Changed] + counts[spec.Removed]
	sameFailures := failures.String() == a.lastFailures
	a.lastFailures = failures.String()
	// A reconcile pass that changed nothing, failed only as the last pass
	// did, and has no container stop to tell has nothing new to say
	// (invariant 14).
	quiet := reconcile && changed == 0 && sameFailures && !told
	if quiet && a.reported {
		a.log.Debug("reconcile: nothing to change", "seq", decl.Seq, "resources", len(results), "failed", counts[spec.Failed])
		return
	}
	a.reported = true
	if quiet {
		// The first pass of a run: reported, so the controller's view is
		// fresh, but with nothing new to log.
		a.reports.send(nc, spec.Report{Seq: decl.Seq, Digest: h.digest, Reconcile: true, ApplyMicros: took.Microseconds(), Results: results})
		return
	}
	for _, r := range results {
		switch {
		case r.Outcome == spec.Failed:
			a.log.Warn("resource failed", "seq", decl.Seq, "resource", r.Name, "err", r.Error)
		case r.Note != "":
			a.log.Info("resource "+r.Outcome, "seq", decl.Seq, "resource", r.Name, "note", r.Note)
		}
	}
	a.log.Info("declaration applied", "seq", decl.Seq, "reconcile", reconcile, "created", counts[spec.Created],
		"changed", counts[spec.Changed], "removed", counts[spec.Removed], "failed", counts[spec.Failed],
		"unchanged", counts[spec.Unchanged], "writes", writes)
	a.reports.send(nc, spec.Report{Seq: decl.Seq, Digest: h.digest, Reconcile: reconcile, Writes: writes, ApplyMicros: took.Microseconds(), Results: results})
}

// saveApplied writes the applied sequence and record if state.json does not
// hold them yet: at a stop, so the next start's first heartbeat says what
// was applied.
func (a *Agent) saveApplied() {
	if !a.recordUnsaved && a.savedAppliedSeq == a.state.AppliedSeq {
		return
	}
	if err := a.save(a.state); err != nil {
		a.log.Error("what was applied is not recorded; the next start applies the kept declaration again", "seq", a.state.AppliedSeq, "err", err)
	}
}

// handlePreview answers a dry run: what applying it would change, changing
// nothing, storing nothing.
func (a *Agent) handlePreview(ctx context.Context, nc *nats.Conn, m *nats.Msg) {
	key, err := a.signKey()
	if err != nil {
		a.log.Error("previews cannot be verified", "err", err)
		return
	}
	decl, reason := verifyPreview(m.Data, m.Header.Get(spec.SigHeader), a.kept(key), time.Now())
	r := spec.Report{Seq: decl.Seq, Digest: spec.ContentDigest(m.Data), Preview: true, Refused: reason}
	if reason == "" {
		r.Results = a.engine.Preview(ctx, decl.Resources, a.state.Applied)
	}
	a.log.Debug("preview answered", "seq", decl.Seq, "refused", reason)
	a.reports.send(nc, r)
}

// rosterRetry is how long a declaration that waits for its roster waits
// before it is handled again (it is handled at once when a roster arrives
// before).
const rosterRetry = 5 * time.Second

// rosterWait is when a declaration that waits for its roster is handled
// again: at the moment drawn to ask for the roster, or after rosterRetry.
func (a *Agent) rosterWait() time.Duration {
	if wait := time.Until(a.askAt); wait > 0 {
		return wait + 10*time.Millisecond
	}
	return rosterRetry
}

// names is the roster the host serves: the kept roster message; none
// (no name) when it holds a declaration and no roster yet; false when it
// holds neither.
func (a *Agent) names() (roster spec.Roster, source string, ok bool) {
	switch {
	case a.roster != nil:
		return a.roster.doc.Names, "roster " + a.roster.digest, true
	case a.held != nil:
		return spec.Roster{}, "no roster", true
	}
	return spec.Roster{}, "", false
}

// serveNames hands the roster held (names) to the resolver, whole, unless
// the resolver was last handed these same names: a declaration that
// names the roster held changes no name, and building the zone is work
// in the size of the fleet (a push to every host would otherwise cost the
// fleet O(N²) for nothing).
func (a *Agent) serveNames() {
	if a.cfg.Names == nil {
		return
	}
	roster, source, ok := a.names()
	if !ok || source == a.served {
		return
	}
	z := zoneOf(roster)
	if err := z.Validate(); err != nil {
		a.log.Warn("the roster holds names the resolver cannot serve; it serves the rest", "err", err)
	}
	a.cfg.Names.SetZone(z)
	a.served = source
}

// reconcile applies the kept declaration again, as it was decoded when it
// was kept, correcting drift.
func (a *Agent) reconcile(ctx context.Context, nc *nats.Conn) {
	if a.held == nil {
		return
	}
	a.apply(ctx, nc, a.held, true)
}

// busBlobs fetches blobs from the controller, chunk by chunk.
type busBlobs struct {
	nc   *nats.Conn
	node string
}

func (b busBlobs) Fetch(ctx context.Context, digest string, size int64, w io.Writer) error {
	for off := int64(0); off < size; {
		var chunk spec.BlobChunkReply
		if err := request(ctx, b.nc, spec.NodeSubject(b.node, spec.KindBlob), spec.BlobRequest{Digest: digest, Offset: off}, &chunk); err != nil {
			return fmt.Errorf("fetch blob %s at %d: %w", digest, off, err)
		}
		if chunk.Size != size {
			return fmt.Errorf("fetch blob %s: the controller holds %d bytes, the declaration says %d", digest, chunk.Size, size)
		}
		if len(chunk.Data) == 0 {
			return fmt.Errorf("fetch blob %s: no data at %d", digest, off)
		}
		if int64(len(chunk.Data)) > size-off {
			return fmt.Errorf("fetch blob %s: %d bytes at %d run past its %d", digest, len(chunk.Data), off, size)
		}
		if _, err := w.Write(chunk.Data); err != nil {
			return err
		}
		off += int64(len(chunk.Data))
	}
	return nil
}
