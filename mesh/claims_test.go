package mesh

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestClaimsAboveWhatWasSent: a node that reports applying a sequence far
// above the last sent to it (by heartbeat or by report) is named in status
// and numbers nothing: its next declaration follows the last sent, and the
// store keeps its sequences. A claim a little ahead (a restored store) is
// not taken as applied (it was never sent) but numbered past, and named
// until a push catches up.
func TestClaimsAboveWhatWasSent(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	for range 3 {
		if _, _, err := c.sender.send(ctx, "alpha", content{resources: nil}, resendAll); err != nil {
			t.Fatal(err)
		}
	}
	heartbeat := func(applied uint64) {
		t.Helper()
		hb := mustJSON(t, spec.Heartbeat{Node: "alpha", Time: clk.Now(), AppliedSeq: applied, Protocol: spec.Protocol})
		if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindHeartbeat), hb); err != nil {
			t.Fatal(err)
		}
	}
	report := func(seq uint64) {
		t.Helper()
		r := mustJSON(t, spec.Report{Node: "alpha", Seq: seq, Time: clk.Now(), Results: []spec.ResourceResult{}})
		if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindReport), r); err != nil {
			t.Fatal(err)
		}
	}
	// wantStatus waits until status names alpha's claim as want says
	// (nothing when want is empty), in state, with applied as its applied
	// sequence (the heartbeat recorded).
	wantStatus := func(want, state string, applied uint64) {
		t.Helper()
		poll.Until(t, 10*time.Second, "alpha's status", func() error {
			res := statusOf(t, c)
			problems := strings.Join(res.Problems, "\n")
			named := strings.Contains(problems, "alpha reports applying declaration")
			st := nodeStatus(res, "alpha")
			if (want == "" && !named || want != "" && strings.Contains(problems, want)) && st.State == state && st.AppliedSeq == applied && st.LastHeard != nil {
				return nil
			}
			return fmt.Errorf("state %q, applied %d, problems:\n%s\nwant %q in state %q, applied %d", st.State, st.AppliedSeq, problems, want, state, applied)
		})
	}
	wantNext := func(want uint64) {
		t.Helper()
		seq, _, err := c.sender.send(ctx, "alpha", content{resources: nil}, resendAll)
		if err != nil || seq != want {
			t.Fatalf("next declaration: %d %v, want %d", seq, err, want)
		}
	}

	heartbeat(math.MaxInt64)
	wantStatus("alpha reports applying declaration 9223372036854775807, more than 1048576 above the last sent to it (3): not believed", "not believed", 0)
	// Status shows a heartbeat as heard before the store records it.
	poll.Until(t, 10*time.Second, "the heartbeat recorded, its claim not kept", func() error {
		n, _ := db.Node(ctx, "alpha")
		if !n.LastHeard.IsZero() && n.AppliedSeq != 0 {
			t.Fatalf("stored: applied %d; want the claim not kept", n.AppliedSeq)
		}
		if !n.LastHeard.IsZero() {
			return nil
		}
		return fmt.Errorf("stored: applied %d, heard %v", n.AppliedSeq, n.LastHeard)
	})
	wantNext(4)
	heartbeat(math.MaxUint64)
	wantStatus("alpha reports applying declaration 18446744073709551615", "not believed", 0)
	wantNext(5)
	// A report of such a sequence is not recorded either.
	report(math.MaxUint64)
	report(1 << 62)
	wantStatus("alpha reports applying declaration 4611686018427387904", "not believed", 0)
	if r, err := db.LastReport(ctx, "alpha"); err == nil {
		t.Fatalf("a report of sequence %d was recorded", r.Seq)
	}
	wantNext(6)

	// An honest heartbeat clears the claim.
	heartbeat(6)
	wantStatus("", "current", 6)

	// A host ahead of a restored store: not taken as applied (never
	// sent), numbered past, named.
	heartbeat(40)
	wantStatus("alpha reports applying declaration 40, above the last sent to it (6): not taken as applied", "current", 6)
	wantNext(41)
	heartbeat(41)
	wantStatus("", "current", 41)

	// A store written before claims were checked may hold one: it numbers
	// nothing either.
	if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: math.MaxInt64, Protocol: spec.Protocol}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	wantNext(42)
}
