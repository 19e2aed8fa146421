package host

import (
	"encoding/json"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// reportRetry is how long a report waits for the controller's answer
// before the host sends it again, unless Config.ReportRetry says
// otherwise.
const reportRetry = 30 * time.Second

// sentReport is the last report sent, until the controller answers it.
type sentReport struct {
	seq  uint64
	time time.Time
	body []byte
	sent time.Time
}

// report sends r, stamped, asking for an answer under the host's own
// inbox; the last one is kept until answered and sent again
// (resendReport). Published once, a report lost (the connection dropping as it went, a
// bus that dropped it) would leave a push waiting for it, and status
// showing an older one. A preview's answer is not kept: the dry run that
// asked for it waits a few seconds, not for a retry.
func (a *Agent) report(nc *nats.Conn, r spec.Report) {
	r.Node, r.Time = a.state.Node, time.Now().UTC()
	if r.Results == nil {
		r.Results = []spec.ResourceResult{}
	}
	body, err := json.Marshal(r)
	if err != nil {
		a.log.Warn("report not sent", "seq", r.Seq, "err", err)
		return
	}
	if r.Preview {
		err = nc.Publish(spec.NodeSubject(a.state.Node, spec.KindReport), body)
	} else {
		a.unacked = &sentReport{seq: r.Seq, time: r.Time, body: body, sent: time.Now()}
		err = a.publishReport(nc, body)
		a.arm(a.cfg.ReportRetry)
	}
	if err != nil {
		a.log.Warn("report not sent", "seq", r.Seq, "err", err)
	}
}

// acked takes the controller's answer to a report: the last report, when
// it names it, is held by the controller.
func (a *Agent) acked(m *nats.Msg) {
	var ack spec.ReportAck
	if err := spec.DecodeReply(m.Data, &ack); err != nil {
		a.log.Debug("an answer to a report did not decode", "err", err)
		return
	}
	if u := a.unacked; u != nil && u.seq == ack.Seq && u.time.Equal(ack.Time) {
		a.unacked = nil
	}
}

// resendReport sends the last report again when the controller has not
// answered it: now, when the host connected again (a report published as
// the connection dropped is lost), else once reportRetry passed since it
// was last sent.
func (a *Agent) resendReport(nc *nats.Conn, now bool) {
	u := a.unacked
	if u == nil {
		return
	}
	if wait := a.cfg.ReportRetry - time.Since(u.sent); !now && wait > 0 {
		a.arm(wait)
		return
	}
	u.sent = time.Now()
	if err := a.publishReport(nc, u.body); err != nil {
		a.log.Warn("report not sent again", "seq", u.seq, "err", err)
	} else {
		a.log.Info("report sent again: the controller did not answer it", "seq", u.seq)
	}
	a.arm(a.cfg.ReportRetry)
}

// publishReport publishes a report's body, its answer asked for under the
// host's own inbox.
func (a *Agent) publishReport(nc *nats.Conn, body []byte) error {
	return nc.PublishRequest(spec.NodeSubject(a.state.Node, spec.KindReport), spec.ReportAckSubject(a.state.Node), body)
}
