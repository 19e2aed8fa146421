package host

import (
	"encoding/json"
	"log/slog"
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

// reporter sends the host's reports, and keeps the last one until the
// controller answers it, to send it again.
type reporter struct {
	node string
	log  *slog.Logger
	// retry is how long a report waits for the controller's answer before
	// it is sent again (Config.ReportRetry).
	retry time.Duration
	// arm has the agent's retry run within d: resend is then due.
	arm func(d time.Duration)
	// unacked is the last report sent, until the controller answers it;
	// nil once answered.
	unacked *sentReport
}

// send sends r, stamped, asking for an answer under the host's own
// inbox; the last one is kept until answered and sent again
// (resend). Published once, a report lost (the connection dropping as it went, a
// bus that dropped it) would leave a push waiting for it, and status
// showing an older one. A preview's answer is not kept: the dry run that
// asked for it waits a few seconds, not for a retry.
func (p *reporter) send(nc *nats.Conn, r spec.Report) {
	r.Node, r.Time = p.node, time.Now().UTC()
	if r.Results == nil {
		r.Results = []spec.ResourceResult{}
	}
	body, err := json.Marshal(r)
	if err != nil {
		p.log.Warn("report not sent", "seq", r.Seq, "err", err)
		return
	}
	if r.Preview {
		err = nc.Publish(spec.NodeSubject(p.node, spec.KindReport), body)
	} else {
		p.unacked = &sentReport{seq: r.Seq, time: r.Time, body: body, sent: time.Now()}
		err = p.publish(nc, body)
		p.arm(p.retry)
	}
	if err != nil {
		p.log.Warn("report not sent", "seq", r.Seq, "err", err)
	}
}

// acked takes the controller's answer to a report: the last report, when
// it names it, is held by the controller.
func (p *reporter) acked(m *nats.Msg) {
	var ack spec.ReportAck
	if err := spec.DecodeReply(m.Data, &ack); err != nil {
		p.log.Debug("an answer to a report did not decode", "err", err)
		return
	}
	if u := p.unacked; u != nil && u.seq == ack.Seq && u.time.Equal(ack.Time) {
		p.unacked = nil
	}
}

// resend sends the last report again when the controller has not
// answered it: now, when the host connected again (a report published as
// the connection dropped is lost), else once reportRetry passed since it
// was last sent.
func (p *reporter) resend(nc *nats.Conn, now bool) {
	u := p.unacked
	if u == nil {
		return
	}
	if wait := p.retry - time.Since(u.sent); !now && wait > 0 {
		p.arm(wait)
		return
	}
	u.sent = time.Now()
	if err := p.publish(nc, u.body); err != nil {
		p.log.Warn("report not sent again", "seq", u.seq, "err", err)
	} else {
		p.log.Info("report sent again: the controller did not answer it", "seq", u.seq)
	}
	p.arm(p.retry)
}

// publish publishes a report's body, its answer asked for under the
// host's own inbox.
func (p *reporter) publish(nc *nats.Conn, body []byte) error {
	return nc.PublishRequest(spec.NodeSubject(p.node, spec.KindReport), spec.ReportAckSubject(p.node), body)
}
