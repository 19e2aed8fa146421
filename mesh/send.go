package mesh

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// sender numbers, signs, records and publishes nodes' declarations, and
// hands them again to hosts that missed them (resend.go): the one way a
// declaration reaches the stream.
type sender struct {
	base
	signKey ed25519.PrivateKey
	locks   *nodeLocks // per node: sequences are taken under them
	claims  *claimBook
	numbers *numberer
	metrics *metrics
	// crashFile names the point of a push at which the process dies
	// (crash.go); empty: it never does.
	crashFile string
	// nc and js are the controller's full-power connection and its
	// JetStream, both set once Run connects.
	nc func() *nats.Conn
	js func() jetstream.JetStream
}

// sendItem is what one node is to be sent: its declaration's content.
type sendItem struct {
	node string
	ct   content
}

// sendResult is what became of one sendItem: the sequence sent (or, when
// unchanged, the one the node holds), or why nothing was sent.
type sendResult struct {
	seq       uint64
	unchanged bool
	err       error
}

// send numbers, signs, records and publishes a declaration of ct to node,
// under the node's lock: sendAll for one node.
func (s *sender) send(ctx context.Context, node string, ct content, which resend) (seq uint64, unchanged bool, err error) {
	r := s.sendAll(ctx, []sendItem{{node: node, ct: ct}}, which)[0]
	return r.seq, r.unchanged, r.err
}

// resend is which nodes a send sends a declaration that holds what their
// last holds.
type resend int

const (
	// resendNone sends a node only what differs from what it holds.
	resendNone resend = iota
	// resendFailed sends it also to a node whose last apply failed: an
	// operator's push again after a failure always does something.
	resendFailed
	// resendAll sends to every node (push --force).
	resendAll
)

// sendAll numbers, signs, records and publishes a declaration to each
// item's node, under the nodes' locks (taken in stripe order, so two sends
// never wait for each other's). Unless which says otherwise, a node whose
// last declaration holds the same content (the digest status
// compares for "pending": the chain included) is sent nothing, and its
// result is that
// declaration's sequence, unchanged: it holds it already, or will, since it
// is in the stream unexpired. One it has not applied and that has expired
// is sent again.
//
// It reads every node's row and the head of its last declaration (not its
// body) in one query each, records every declaration in one transaction,
// and only then publishes them, all at once, waiting for each
// acknowledgement: a declaration recorded is published whatever happens to
// the caller's context (a controller killed between the two publishes it
// at its next start: publishRecorded). A node's own failure (it was
// removed, its declaration is over the cap, its sequence is not above the
// last recorded) is its result alone; a failure of the reads or of the
// transaction is every node's, and nothing was sent.
func (s *sender) sendAll(ctx context.Context, items []sendItem, which resend) []sendResult {
	out := make([]sendResult, len(items))
	var names []string
	first := map[string]int{} // the first item of each node; a later one takes its result
	for i, it := range items {
		if _, ok := first[it.node]; !ok {
			first[it.node] = i
			names = append(names, it.node)
		}
	}
	slices.Sort(names)
	defer s.locks.lockAll(names)()
	fail := func(err error) []sendResult {
		for i := range out {
			out[i].err = err
		}
		return out
	}
	heads, err := s.db.DeclarationHeads(ctx, names)
	if err != nil {
		return fail(err)
	}
	nodes, err := s.db.NodesNamed(ctx, names)
	if err != nil {
		return fail(err)
	}
	var failed map[string]uint64
	if which == resendFailed {
		if failed, err = s.db.FailedReports(ctx); err != nil {
			return fail(err)
		}
	}
	// Which nodes are sent one: the others hold what they would be sent,
	// or are not there to send to.
	var due []int
	for name, i := range first {
		n, ok := nodes[name]
		seq, lastFailed := failed[name]
		switch {
		case !ok:
			out[i].err = callerError(fmt.Sprintf("node %q was removed: nothing was sent to it", name))
		case !n.Removing.IsZero():
			out[i].err = callerError(removingError(name))
		case which != resendAll && !(lastFailed && seq >= heads[name].Seq) && s.holds(heads[name], n, items[i].ct):
			out[i] = sendResult{seq: heads[name].Seq, unchanged: true}
		default:
			due = append(due, i)
		}
	}
	slices.Sort(due)
	if len(due) > 0 {
		s.sendDue(ctx, items, due, heads, nodes, out)
	}
	for i, it := range items {
		if j := first[it.node]; j != i {
			out[i] = out[j]
			if out[j].err == nil {
				out[i].unchanged = true // it holds what the first sent it
			}
		}
	}
	return out
}

// sendDue numbers, signs, records and publishes the declarations of
// items[due], the caller holding their nodes' locks, into out.
func (s *sender) sendDue(ctx context.Context, items []sendItem, due []int, heads map[string]store.Declaration, nodes map[string]store.Node, out []sendResult) {
	m, err := s.db.Mesh(ctx)
	if err != nil {
		for _, i := range due {
			out[i].err = err
		}
		return
	}
	now := s.now().UTC()
	var records []store.Declaration
	var recorded []int // the item of each record
	for _, i := range due {
		node, ct := items[i].node, items[i].ct
		n, last := nodes[node], heads[node].Seq
		// Numbered max(last sent, last applied, what it claims above the
		// last sent) + 1, so a restored store never wedges a host (a claim
		// far above the last sent is not believed: see weigh).
		decl := spec.Declaration{Mesh: m.Name, Node: node, Seq: max(last, believedApplied(n.AppliedSeq, last), s.claims.ahead(node)) + 1,
			Issued: now, Expires: now.Add(spec.DefaultExpiry), Protocol: spec.Protocol,
			Resources: ct.resources, RosterRef: ct.ref, CAChain: ct.chain}
		body, err := json.Marshal(decl)
		if err != nil {
			out[i].err = fmt.Errorf("encode declaration of node %q: %w", node, err)
			continue
		}
		if err := oversize(node, len(body), ct.resources, spec.Roster{}); err != nil {
			out[i].err = err
			continue
		}
		records = append(records, store.Declaration{Node: node, Seq: decl.Seq, Body: body, Sig: ed25519.Sign(s.signKey, body),
			Content: ct.digest(), Sent: decl.Issued, Expires: decl.Expires})
		recorded = append(recorded, i)
	}
	if len(records) == 0 {
		return
	}
	s.crashAt(CrashBeforeRecord)
	failed, err := s.db.RecordDeclarations(ctx, records)
	if err != nil {
		for k, i := range recorded {
			out[i].err = fmt.Errorf("record declaration %d of node %q: %w", records[k].Seq, records[k].Node, err)
		}
		return
	}
	var msgs []*nats.Msg
	var published []int // the record of each message
	for k, d := range records {
		if err := failed[d.Node]; err != nil {
			out[recorded[k]].err = err
			continue
		}
		msgs = append(msgs, signedMsg(spec.DeclarationSubject(d.Node), d.Body, d.Sig))
		published = append(published, k)
	}
	s.crashAt(CrashBeforePublish)
	// Recorded as sent, they are published whatever happens to the
	// caller's context: a push that stops never leaves a recorded
	// declaration unsent, nor one sent that it does not list.
	errs := s.publish(context.WithoutCancel(ctx), msgs)
	s.crashAt(CrashBeforeReports)
	for j, err := range errs {
		d := records[published[j]]
		i := recorded[published[j]]
		if err != nil {
			out[i].err = fmt.Errorf("publish declaration %d of node %q: %w", d.Seq, d.Node, err)
			continue
		}
		s.metrics.countSent(len(d.Body))
		s.log.Info("declaration sent", "node", d.Node, "seq", d.Seq, "resources", len(items[i].ct.resources))
		out[i].seq = d.Seq
	}
}

const (
	// publishWindow is how many publishes wait for their acknowledgement
	// at once.
	publishWindow = 256
	// publishWait bounds the wait for every acknowledgement of one
	// publishAll.
	publishWait = 30 * time.Second
)

// The headers of an atomic batch (nats-server's ADR-50; nats.go has no
// names for them).
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// An atomic batch carries at most atomicBatch declarations (nats-server
// refuses a batch of more than 1,000 messages unless its configuration
// says otherwise) and atomicBatchBytes of them (the server holds a batch
// in memory until it commits), one at least.
const (
	atomicBatch      = 1000
	atomicBatchBytes = 8 << 20
)

// publish publishes msgs to the stream and says what became of each (nil:
// the stream holds it). They go in atomic batches (spec.DeclarationStream
// allows them), so the stream writes and syncs each batch once, not each
// message (the bus syncs every write: sync_interval always); a batch the
// stream does not take whole is published message by message (publishAll).
// The server hands each message to the consumers as it writes it, before
// the commit's answer.
func (s *sender) publish(ctx context.Context, msgs []*nats.Msg) []error {
	errs := make([]error, len(msgs))
	sizes := make([]int, len(msgs))
	for i, m := range msgs {
		sizes[i] = len(m.Data)
	}
	from := 0
	for _, to := range batchEnds(sizes, atomicBatch, atomicBatchBytes) {
		part := msgs[from:to]
		if len(part) > 1 {
			err := s.publishAtomic(ctx, part)
			if err == nil {
				from = to
				continue
			}
			s.log.Warn("declarations not published as one batch: published one by one", "declarations", len(part), "err", err)
		}
		copy(errs[from:], s.publishAll(ctx, part))
		from = to
	}
	return errs
}

// batchEnds cuts messages of sizes, in order, into batches of at most n
// messages and maxBytes (a message larger alone is a batch of its own),
// and returns where each batch ends.
func batchEnds(sizes []int, n, maxBytes int) []int {
	var ends []int
	for from := 0; from < len(sizes); {
		to, size := from, 0
		for to < len(sizes) && to-from < n && (to == from || size+sizes[to] <= maxBytes) {
			size += sizes[to]
			to++
		}
		ends = append(ends, to)
		from = to
	}
	return ends
}

// publishAtomic publishes msgs as one atomic batch: copies of them carry
// the batch headers, the last one commits, and the stream's answer to it
// says whether it stored them all (it stores all or none). An error says
// the stream did not answer that it took them: it may hold none, or, when
// the answer was lost, all.
func (s *sender) publishAtomic(ctx context.Context, msgs []*nats.Msg) error {
	id := "decl-" + randomHex(12)
	var commit *nats.Msg
	for i, m := range msgs {
		b := nats.NewMsg(m.Subject)
		b.Data = m.Data
		for k, v := range m.Header {
			b.Header[k] = v
		}
		b.Header.Set(batchIDHeader, id)
		b.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		if i == len(msgs)-1 {
			b.Header.Set(batchCommitHeader, "1")
			commit = b
			break
		}
		if err := s.nc().PublishMsg(b); err != nil {
			return fmt.Errorf("publish message %d of batch %s: %w", i+1, id, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, publishWait)
	defer cancel()
	reply, err := s.nc().RequestMsgWithContext(rctx, commit)
	if err != nil {
		return fmt.Errorf("commit batch %s of %d: %w", id, len(msgs), err)
	}
	var ack struct {
		Stream string `json:"stream"`
		Batch  string `json:"batch"`
		Count  int    `json:"count"`
		Error  *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return fmt.Errorf("commit batch %s of %d: the stream's answer does not decode: %w", id, len(msgs), err)
	}
	if ack.Error != nil {
		return fmt.Errorf("commit batch %s of %d: the stream refused it: %s (%d)", id, len(msgs), ack.Error.Description, ack.Error.ErrCode)
	}
	if ack.Stream != spec.DeclarationStream || ack.Batch != id || ack.Count != len(msgs) {
		return fmt.Errorf("commit batch %s of %d: the stream answered for %d of batch %q in stream %q", id, len(msgs), ack.Count, ack.Batch, ack.Stream)
	}
	return nil
}

// publishAll publishes msgs to the stream without waiting for each
// acknowledgement before the next publish (publishWindow in flight), then
// waits for every one, up to publishWait in all; the error of each, nil
// when the stream acknowledged it. One that failed is published once more
// and waited for alone (as a single publish is, asking again while the
// stream has no responder); after one of those fails too, the others keep
// their first error. ctx bounds nothing: the caller recorded them as sent.
func (s *sender) publishAll(ctx context.Context, msgs []*nats.Msg) []error {
	errs := make([]error, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	wctx, cancel := context.WithTimeout(ctx, publishWait)
	defer cancel()
	wait := func(i int) {
		f := futures[i]
		if f == nil {
			return
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = err
		case <-wctx.Done():
			errs[i] = fmt.Errorf("no acknowledgement within %s", publishWait)
		}
	}
	for i, m := range msgs {
		if i >= publishWindow {
			wait(i - publishWindow)
		}
		f, err := s.js().PublishMsgAsync(m)
		if err != nil {
			errs[i] = err
			continue
		}
		futures[i] = f
	}
	for i := max(0, len(msgs)-publishWindow); i < len(msgs); i++ {
		wait(i)
	}
	for i, err := range errs {
		if err == nil {
			continue
		}
		if _, again := s.js().PublishMsg(ctx, msgs[i]); again != nil {
			errs[i] = fmt.Errorf("%w; published again: %w", err, again)
			break
		}
		errs[i] = nil
	}
	return errs
}

// holds says whether last, node n's last declaration (the zero one when
// none was sent), holds ct and n has it or will (it applied it, or it is
// in the stream unexpired).
func (s *sender) holds(last store.Declaration, n store.Node, ct content) bool {
	if last.Seq == 0 || differs(ct, last) {
		return false
	}
	// Never applied, and expired: it would be refused.
	return n.AppliedSeq >= last.Seq || s.now().Before(last.Expires)
}
