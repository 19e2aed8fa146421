package host_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestReportSentAgainUntilAnswered: a report the controller does not
// answer is sent again, the same, every ReportRetry until it is answered,
// and then no more: a report lost on the way would leave the push
// waiting for a host that applied it until the push ends.
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
	// Answered, it is sent no more. One more send may cross the answer
	// on a loaded machine (the retry fires before the answer arrives),
	// and is answered too; then the host falls quiet.
	quiet(t, b, 5*b.reportRetry, 20*time.Second, func(r spec.Report) bool { return r.Seq == 1 && r.Time.Equal(first.Time) })

}

// quiet waits until the host sends no report for a period, within a
// deadline; a report sent meanwhile is allowed only if crossing says it may
// have crossed an answer on its way.
func quiet(t *testing.T, b *bench, period, within time.Duration, crossing func(spec.Report) bool) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case r := <-b.reports:
			if !crossing(r) {
				t.Fatalf("a report sent after the last was answered: %+v", r)
			}
		case <-time.After(period):
			return
		case <-deadline:
			t.Fatalf("the host still sends its report %s after it was answered", within)
		}
	}
}
