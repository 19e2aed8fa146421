package host

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// delivery is one message from the node's delivery subject, verified.
type delivery struct {
	msg     *nats.Msg
	raw     []byte
	sig     []byte
	decl    spec.Declaration
	verdict verdict
	reason  string
}

// drain takes first and every delivery the stream says is still pending
// behind it (the count each delivery carries in its reply subject): a batch,
// handled in sequence order rather than arrival order. It waits at most a
// quarter second for the pending ones.
func drain(first *nats.Msg, ch <-chan *nats.Msg) []*nats.Msg {
	batch := []*nats.Msg{first}
	deadline := time.After(250 * time.Millisecond)
	for last := first; pending(last) > 0; {
		select {
		case last = <-ch:
			batch = append(batch, last)
		case <-deadline:
			return batch
		}
	}
	return batch
}

// pending is how many deliveries the consumer held behind m when it sent it.
func pending(m *nats.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.NumPending
}

func (a *Agent) signKey() (ed25519.PublicKey, error) {
	k, err := base64.StdEncoding.DecodeString(a.state.SignKey)
	if err != nil || len(k) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("the controller's signing key in the host state is not an ed25519 key")
	}
	return k, nil
}

// handleBatch verifies every delivery, then handles them by sequence: a
// refusal is terminated and reported with its reason; a duplicate is acked;
// an accepted one is kept durably, acked, applied and reported.
func (a *Agent) handleBatch(ctx context.Context, nc *nats.Conn, msgs []*nats.Msg) {
	key, err := a.signKey()
	if err != nil {
		a.log.Error("declarations cannot be verified", "err", err)
		return
	}
	ds := make([]delivery, len(msgs))
	for i, m := range msgs {
		ds[i] = delivery{msg: m, raw: m.Data}
		ds[i].sig, _ = base64.StdEncoding.DecodeString(m.Header.Get(spec.SigHeader))
	}
	// Sequence order, by the sequence each one claims: nothing is trusted
	// here, since every one is verified in turn below (the kept sequence
	// moves as the batch is handled).
	for i := range ds {
		var claim struct {
			Seq uint64 `json:"seq"`
		}
		json.Unmarshal(ds[i].raw, &claim)
		ds[i].decl.Seq = claim.Seq
	}
	sort.SliceStable(ds, func(i, j int) bool { return ds[i].decl.Seq < ds[j].decl.Seq })
	for _, d := range ds {
		d.decl, d.verdict, d.reason = verify(d.raw, d.msg.Header.Get(spec.SigHeader), a.kept(key), time.Now())
		switch d.verdict {
		case refuse:
			a.log.Warn("declaration refused", "seq", d.decl.Seq, "reason", d.reason)
			a.respond(nc, d.msg, "+TERM")
			a.report(nc, spec.Report{Seq: d.decl.Seq, Digest: spec.ContentDigest(d.raw), Refused: d.reason})
		case duplicate:
			a.log.Debug("declaration delivered again", "seq", d.decl.Seq)
			a.respond(nc, d.msg, "+ACK")
		case accept:
			a.state.Seq, a.state.Declaration, a.state.Signature = d.decl.Seq, d.raw, d.sig
			if err := WriteState(a.cfg.Dir, a.state); err != nil {
				// Not kept, so not acked: it is delivered again.
				a.log.Error("declaration not kept; it will be delivered again", "seq", d.decl.Seq, "err", err)
				continue
			}
			a.respond(nc, d.msg, "+ACK")
			// The names first: they are the mesh's, whatever this node's
			// resources make of the apply.
			a.serveNames()
			a.apply(ctx, nc, d.decl, d.raw, false)
		}
	}
}

func (a *Agent) kept(key ed25519.PublicKey) kept {
	return kept{mesh: a.state.Mesh, node: a.state.Node, key: key, seq: a.state.Seq, raw: a.state.Declaration}
}

// apply makes the machine hold decl, records what it holds and reports. A
// reconcile pass that changed nothing logs nothing above debug and sends no
// report.
func (a *Agent) apply(ctx context.Context, nc *nats.Conn, decl spec.Declaration, raw []byte, reconcile bool) {
	began := time.Now()
	results, applied, writes := a.engine.Apply(ctx, decl.Resources, a.state.Applied)
	took := time.Since(began)
	told := a.noteStops(results, time.Now())
	a.state.Applied = applied
	a.state.AppliedSeq = decl.Seq
	a.appliedSeq.Store(decl.Seq)
	if err := WriteState(a.cfg.Dir, a.state); err != nil {
		a.log.Error("what was applied is not recorded", "seq", decl.Seq, "err", err)
	}
	// An apply cut short by the host stopping failed only because it was
	// stopped: reporting "context canceled" would leave that in status
	// until something else changed. The next start applies it again and
	// reports.
	if ctx.Err() != nil {
		a.log.Info("apply cut short by the stop; the next start applies it again", "seq", decl.Seq)
		return
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
		a.report(nc, spec.Report{Seq: decl.Seq, Digest: spec.ContentDigest(raw), Reconcile: true, ApplyMicros: took.Microseconds(), Results: results})
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
	a.report(nc, spec.Report{Seq: decl.Seq, Digest: spec.ContentDigest(raw), Reconcile: reconcile, Writes: writes, ApplyMicros: took.Microseconds(), Results: results})
}

// handlePreview answers a dry run: what applying it would change, changing
// nothing, storing nothing, acking nothing.
func (a *Agent) handlePreview(nc *nats.Conn, m *nats.Msg) {
	key, err := a.signKey()
	if err != nil {
		a.log.Error("previews cannot be verified", "err", err)
		return
	}
	decl, reason := verifyPreview(m.Data, m.Header.Get(spec.SigHeader), a.kept(key), time.Now())
	r := spec.Report{Seq: decl.Seq, Digest: spec.ContentDigest(m.Data), Preview: true, Refused: reason}
	if reason == "" {
		r.Results = a.engine.Preview(decl.Resources, a.state.Applied)
	}
	a.log.Debug("preview answered", "seq", decl.Seq, "refused", reason)
	a.report(nc, r)
}

// serveNames hands the kept declaration's roster to the resolver, whole.
func (a *Agent) serveNames() {
	if a.cfg.Names == nil || len(a.state.Declaration) == 0 {
		return
	}
	var decl spec.Declaration
	if err := spec.Decode(a.state.Declaration, &decl); err != nil {
		a.log.Error("the kept declaration does not decode; the resolver keeps its names", "err", err)
		return
	}
	z := zoneOf(decl.Roster)
	if err := z.Validate(); err != nil {
		a.log.Warn("the roster holds names the resolver cannot serve; it serves the rest", "err", err)
	}
	a.cfg.Names.SetZone(z)
}

// reconcile applies the kept declaration again, correcting drift.
func (a *Agent) reconcile(ctx context.Context, nc *nats.Conn) {
	if len(a.state.Declaration) == 0 {
		return
	}
	var decl spec.Declaration
	if err := spec.Decode(a.state.Declaration, &decl); err != nil {
		a.log.Error("the kept declaration does not decode", "err", err)
		return
	}
	a.apply(ctx, nc, decl, a.state.Declaration, true)
}

func (a *Agent) respond(nc *nats.Conn, m *nats.Msg, ack string) {
	if m.Reply == "" {
		return
	}
	if err := nc.Publish(m.Reply, []byte(ack)); err != nil {
		a.log.Warn("acknowledgement not sent", "ack", ack, "err", err)
	}
}

func (a *Agent) report(nc *nats.Conn, r spec.Report) {
	r.Node, r.Time = a.state.Node, time.Now().UTC()
	if r.Results == nil {
		r.Results = []spec.ResourceResult{}
	}
	if err := publish(nc, spec.NodeSubject(a.state.Node, spec.KindReport), r); err != nil {
		a.log.Warn("report not sent", "seq", r.Seq, "err", err)
	}
}

// busBlobs fetches blobs from the controller, chunk by chunk.
type busBlobs struct {
	nc   *nats.Conn
	node string
}

func (b busBlobs) Fetch(ctx context.Context, digest string, size int64) ([]byte, error) {
	data := make([]byte, 0, size)
	for int64(len(data)) < size {
		var chunk spec.BlobChunkReply
		if err := request(ctx, b.nc, spec.NodeSubject(b.node, spec.KindBlob), spec.BlobRequest{Digest: digest, Offset: int64(len(data))}, &chunk); err != nil {
			return nil, fmt.Errorf("fetch blob %s at %d: %w", digest, len(data), err)
		}
		if chunk.Size != size {
			return nil, fmt.Errorf("fetch blob %s: the controller holds %d bytes, the declaration says %d", digest, chunk.Size, size)
		}
		if len(chunk.Data) == 0 {
			return nil, fmt.Errorf("fetch blob %s: no data at %d", digest, len(data))
		}
		data = append(data, chunk.Data...)
	}
	if got := spec.ContentDigest(data); got != digest {
		return nil, fmt.Errorf("fetch blob %s: the bytes received hash to %s", digest, got)
	}
	return data, nil
}
