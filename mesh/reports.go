package mesh

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Reports are written in batches: the handler decodes, checks and queues
// each, and one loop writes what is queued in one transaction, then
// forwards each report recorded to the pushes that wait for it. A push to
// 1,000 nodes is answered by 1,000 reports within a second or two; written
// one transaction each, through SQLite's one writer, they queued behind
// each other's sync to the disk. A report is forwarded only once it is
// recorded.
const (
	// reportBatch is the most reports one transaction writes.
	reportBatch = 256
	// reportQueue is how many reports wait for the writer at most; the
	// handler waits for room beyond it (and the bus drops what a slow
	// subscriber does not take, as for any subscription).
	reportQueue = 4096
)

// onReport takes a node's report: checked, clipped, and queued for the
// report writer (writeReports), which answers it once recorded (protocol
// 7: the host sends it again until then). A preview's answer is stored
// nowhere: it is forwarded at once.
func (c *Controller) onReport(ctx context.Context, m *nats.Msg, who requester) {
	c.metrics.reports.Add(1)
	node, _, _ := spec.NodeFromSubject(m.Subject)
	var r spec.Report
	if err := spec.Decode(m.Data, &r); err != nil {
		c.log.Warn("report refused", "node", node, "err", err)
		return
	}
	if r.Node != node {
		c.log.Warn("report refused: it names another node than its subject", "node", node, "names", r.Node)
		return
	}
	r = keptReport(r)
	if r.Waiting != "" {
		// Not applied, not refused: the host takes it when the roster it
		// names arrives, and reports then. Kept as the node's last report
		// (status says why it has not applied), and forwarded to the push
		// that waits for the apply, which goes on waiting.
		c.log.Warn("declaration waits for its roster", "node", node, "seq", r.Seq, "waiting", spec.Clip(r.Waiting, spec.MaxStatusText))
	}
	if r.Preview {
		c.reports.reported(r)
		return
	}
	select {
	case c.reports.queue <- queuedReport{r: r, at: c.cfg.Now(), msg: m, who: who}:
	case <-ctx.Done():
	}
}

// reportLine writes the reports nodes send, in batches, answers them and
// forwards each to the pushes waiting for it.
type reportLine struct {
	base
	queue   chan queuedReport // the reports not yet written
	claims  *claimBook
	watches *watches
	// respond answers a report's message under its host's own inbox.
	respond func(m *nats.Msg, r requester, body []byte)
	// unsent counts the reports dropped for a declaration never sent;
	// dropLog gates their log lines.
	unsent *atomic.Uint64
	// applied takes the apply time each recorded report says.
	applied prometheus.Observer
	dropLog *logGate
	// changed tells the status pages a batch was written.
	changed func()
}

// queuedReport is a report waiting for the writer, and when it came; msg
// and who are its message and sender, answered once it is recorded.
type queuedReport struct {
	r   spec.Report
	at  time.Time
	msg *nats.Msg
	who requester
}

// ack answers q's report, when its host asked for an answer: the
// controller holds it, so it need not come again.
func (rp *reportLine) ack(q queuedReport) {
	if q.msg == nil || q.msg.Reply == "" {
		return
	}
	rp.respond(q.msg, q.who, spec.EncodeReply(spec.ReportAck{Seq: q.r.Seq, Time: q.r.Time}, nil))
}

// writeReports writes the queued reports until ctx ends: whatever is
// queued when it looks, up to reportBatch, in one transaction. Under a
// burst the reports that come while one batch is written make the next;
// a lone report waits for nothing.
func (rp *reportLine) writeReports(ctx context.Context) {
	for {
		var batch []queuedReport
		select {
		case <-ctx.Done():
			return
		case q := <-rp.queue:
			batch = append(batch, q)
		}
	more:
		for len(batch) < reportBatch {
			select {
			case q := <-rp.queue:
				batch = append(batch, q)
			default:
				break more
			}
		}
		rp.recordReports(ctx, batch)
	}
}

// failedApply says whether r is an apply that failed a resource, or a
// declaration refused or not kept: a push sends such a node its
// declaration again.
func failedApply(r spec.Report) bool {
	if r.Refused != "" || r.Unkept != "" {
		return true
	}
	for _, rr := range r.Results {
		if rr.Outcome == spec.Failed {
			return true
		}
	}
	return false
}

// recordReports records batch in one transaction, each report weighed
// against the last sequence sent to its node (read for the batch at once),
// then forwards each one recorded.
func (rp *reportLine) recordReports(ctx context.Context, batch []queuedReport) {
	defer rp.guard.catch("report batch", nil)
	nodes := make([]string, 0, len(batch))
	for _, q := range batch {
		nodes = append(nodes, q.r.Node)
	}
	heads, err := rp.db.DeclarationHeads(ctx, nodes)
	if err != nil {
		rp.log.Error("reports not recorded", "reports", len(batch), "err", err)
		return
	}
	records := make([]store.ReportRecord, 0, len(batch))
	kept := make([]queuedReport, 0, len(batch))
	for _, q := range batch {
		r := q.r
		if !rp.claims.weigh(r.Node, r.Seq, heads[r.Node].Seq) {
			// Never sent to it: what it says it applied is not taken.
			rp.unsent.Add(1)
			if ok, held := rp.dropLog.allow("report/"+r.Node, q.at); ok {
				rp.log.Warn("report dropped: it names a declaration never sent to the node", "node", r.Node, "seq", r.Seq,
					"sent", heads[r.Node].Seq, "dropped_unlogged_before", held)
			}
			rp.ack(q) // refused for good: sent again, it would be again
			continue
		}
		body, _ := json.Marshal(r)
		records = append(records, store.ReportRecord{Report: store.Report{Node: r.Node, Seq: r.Seq, Body: body, Received: q.at},
			Applied: r.Refused == "" && r.Waiting == "" && r.Unkept == "", Failed: failedApply(r)})
		kept = append(kept, q)
	}
	if len(records) == 0 {
		return
	}
	failed, err := rp.db.RecordReports(ctx, records)
	if err != nil {
		rp.log.Error("reports not recorded", "reports", len(records), "err", err)
		return
	}
	for i, q := range kept {
		if err := failed[i]; err != nil {
			rp.log.Error("report not recorded", "node", q.r.Node, "err", err)
			continue
		}
		rp.ack(q)
		if q.r.ApplyMicros > 0 {
			rp.applied.Observe(float64(q.r.ApplyMicros) / 1e6)
		}
		rp.reported(q.r)
	}
	rp.changed()
}

// reported logs what r says and forwards it to the pushes waiting for it.
func (rp *reportLine) reported(r spec.Report) {
	failed := 0
	for _, res := range r.Results {
		if res.Outcome == spec.Failed {
			failed++
		}
	}
	switch {
	case r.Refused != "":
		rp.log.Warn("declaration refused", "node", r.Node, "seq", r.Seq, "reason", r.Refused)
	case r.Unkept != "":
		rp.log.Warn("declaration not kept by its host", "node", r.Node, "seq", r.Seq, "reason", r.Unkept)
	case failed > 0:
		rp.log.Warn("declaration applied with failures", "node", r.Node, "seq", r.Seq, "failed", failed)
	default:
		rp.log.Debug("report", "node", r.Node, "seq", r.Seq)
	}
	rp.watches.forward(r)
}
