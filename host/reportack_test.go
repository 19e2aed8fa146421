package host_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestReportSentAgainUntilAnswered: a report the controller does not
// answer (protocol 7) is sent again, the same, every ReportRetry until it
// is answered, and then no more; one answering a declaration of protocol
// 6, whose controller answers no report, is sent once. At 9,999 hosts the
// first push heard no report from 4 hosts that had applied it, and waited
// for them to its end.
func TestReportSentAgainUntilAnswered(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.reportRetry = 200 * time.Millisecond
	b.resends.Store(true)
	var sent atomic.Int32
	third := func(spec.Report) bool { return sent.Add(1) >= 3 }
	b.ack.Store(&third)
	b.start()
	b.publish(encode(t, b.declaration(1, fileResource("/one", "1"))), nil)
	first := b.report()
	for range 2 {
		if r := b.report(); r.Seq != 1 || !r.Time.Equal(first.Time) {
			t.Fatalf("sent again: report %d of %s, want the first (%d of %s)", r.Seq, r.Time, first.Seq, first.Time)
		}
	}
	select {
	case r := <-b.reports:
		t.Fatalf("a report sent again after it was answered: %+v", r)
	case <-time.After(5 * b.reportRetry):
	}

	none := func(spec.Report) bool { return false }
	b.ack.Store(&none)
	d := b.declaration(2, fileResource("/two", "2"))
	d.Protocol = spec.ProtocolNoConsumer
	b.publish(encode(t, d), nil)
	if r := b.report(); r.Seq != 2 || r.Refused != "" {
		t.Fatalf("declaration 2 of protocol 6: report %+v", r)
	}
	select {
	case r := <-b.reports:
		t.Fatalf("a report answering a declaration of protocol 6 sent again: %+v", r)
	case <-time.After(5 * b.reportRetry):
	}
}
