package mesh

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// TestUnkeptDeclarationIsShown: a host's report that it could not keep its
// declaration (its disk full) is kept, not taken for an apply, counted a
// failure (a push sends the declaration again), and status says why the
// node has not applied; the apply's report clears it.
func TestUnkeptDeclarationIsShown(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	if _, _, err := c.sender.send(ctx, "alpha", content{resources: []spec.Resource{resource("/a")}}, resendAll); err != nil {
		t.Fatal(err)
	}
	report := func(r spec.Report) {
		t.Helper()
		r.Node, r.Time = "alpha", time.Now()
		c.onReport(ctx, &nats.Msg{Subject: spec.NodeSubject("alpha", spec.KindReport), Data: mustJSON(t, r)}, requester{})
	}
	const says = "alpha could not keep declaration 1: write state.json: no space left on device"
	has := func(st spec.StatusResult) bool { return slices.Contains(st.Problems, says) }
	report(spec.Report{Seq: 1, Unkept: "write state.json: no space left on device"})
	poll.Until(t, 10*time.Second, "status says alpha could not keep its declaration", func() error {
		st, err := c.status(ctx, spec.StatusRequest{})
		if err == nil && has(st) {
			return nil
		}
		return fmt.Errorf("%v %q", err, st.Problems)
	})
	if n, err := db.Node(ctx, "alpha"); err != nil || n.AppliedSeq != 0 {
		t.Fatalf("an unkept report was taken for an apply: applied %d, %v", n.AppliedSeq, err)
	}
	if failed, err := db.FailedReports(ctx); err != nil || failed["alpha"] != 1 {
		t.Fatalf("failed reports %v, %v; want alpha's 1, for a push to send it again", failed, err)
	}
	report(spec.Report{Seq: 1, Results: []spec.ResourceResult{}})
	poll.Until(t, 10*time.Second, "status no longer says alpha could not keep it", func() error {
		st, err := c.status(ctx, spec.StatusRequest{})
		if err == nil && !has(st) && !slices.ContainsFunc(st.Problems, func(p string) bool { return strings.Contains(p, "could not keep") }) {
			return nil
		}
		return fmt.Errorf("%v %q", err, st.Problems)
	})
}
