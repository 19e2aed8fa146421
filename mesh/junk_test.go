package mesh

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestJunkReportSetsNothing: a report of a sequence never sent to its node
// is dropped and counted, and what status says the node applied stays as
// it was; so does a heartbeat that claims it. A heartbeat's launcher
// fall-backs with a digest not of a release's form, no time, or a time
// ahead of the controller's clock are not kept or shown, and are counted.
func TestJunkReportSetsNothing(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now().UTC().Truncate(time.Second)}
	c, db := newController(t, clk)
	ctx := context.Background()
	for range 2 {
		if _, _, err := c.sender.send(ctx, "alpha", content{resources: nil}, resendAll); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(kind string, v any) {
		t.Helper()
		if err := c.nc.Publish(spec.NodeSubject("alpha", kind), mustJSON(t, v)); err != nil {
			t.Fatal(err)
		}
	}
	report := func(seq uint64) {
		t.Helper()
		publish(spec.KindReport, spec.Report{Node: "alpha", Seq: seq, Time: clk.Now(), Results: []spec.ResourceResult{}})
	}
	applied := func(want uint64) {
		t.Helper()
		poll.Until(t, 10*time.Second, fmt.Sprintf("alpha applied %d", want), func() error {
			st := nodeStatus(statusOf(t, c), "alpha")
			if st.AppliedSeq == want && st.State == "current" {
				return nil
			}
			return fmt.Errorf("applied %d, state %s", st.AppliedSeq, st.State)
		})
	}
	publish(spec.KindHeartbeat, spec.Heartbeat{Node: "alpha", Time: clk.Now(), Protocol: spec.Protocol})
	poll.Until(t, 10*time.Second, "alpha's heartbeat recorded", func() error {
		n, err := db.Node(ctx, "alpha")
		if err == nil && !n.LastHeard.IsZero() {
			return nil
		}
		return fmt.Errorf("last heard %v, %v", n.LastHeard, err)
	})
	report(2)
	applied(2)

	report(114149)
	poll.Until(t, 10*time.Second, "the junk report counted", func() error {
		n := metric(t, c, "mesh_reports_unsent_total")
		if n == 1 {
			return nil
		}
		return fmt.Errorf("%d reports of a declaration never sent", n)
	})
	if st := nodeStatus(statusOf(t, c), "alpha"); st.AppliedSeq != 2 {
		t.Fatalf("after a report of 114149, never sent: applied %d, want 2", st.AppliedSeq)
	}
	if r, err := db.LastReport(ctx, "alpha"); err != nil || r.Seq != 2 {
		t.Fatalf("last report kept: %d %v, want 2's", r.Seq, err)
	}

	// A heartbeat that claims it sets nothing either, and carries
	// fall-backs of which one can be true.
	good := hexDigest([]byte("v2"))
	publish(spec.KindHeartbeat, spec.Heartbeat{Node: "alpha", Time: clk.Now(), Protocol: spec.Protocol, AppliedSeq: 114149, Fallbacks: []spec.Fallback{
		{Digest: good, Reason: "exited", At: clk.Now().Add(-time.Minute)},
		{Digest: "../../etc/passwd", Reason: "a digest of no release", At: clk.Now()},
		{Digest: hexDigest([]byte("v3")), Reason: "no time"},
		{Digest: hexDigest([]byte("v4")), Reason: "from the future", At: clk.Now().Add(time.Hour)},
	}})
	poll.Until(t, 10*time.Second, "the true fall-back alone kept", func() error {
		n, err := db.Node(ctx, "alpha")
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Fallbacks) == 1 && n.Fallbacks[0].Digest == good {
			return nil
		}
		return fmt.Errorf("kept %+v", n.Fallbacks)
	})
	if n := metric(t, c, "mesh_fallbacks_refused_total"); n != 3 {
		t.Errorf("fall-backs refused: %d, want 3", n)
	}
	res := statusOf(t, c)
	st := nodeStatus(res, "alpha")
	if st.AppliedSeq != 2 || len(st.Fallbacks) != 1 || st.Fallbacks[0].Digest != good {
		t.Fatalf("status: applied %d, fall-backs %+v; want 2 and the true one", st.AppliedSeq, st.Fallbacks)
	}
	if !strings.Contains(strings.Join(res.Problems, "\n"), "alpha reports applying declaration 114149, above the last sent to it (2): not taken as applied") {
		t.Errorf("problems %q do not name the claim", res.Problems)
	}
}
