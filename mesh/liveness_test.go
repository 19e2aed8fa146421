package mesh

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// TestSilenceRule: a node that said how often it beats is silent once it
// has missed two heartbeats (and the delivery allowance); one whose
// heartbeats do not say keeps the fixed 30 s window.
func TestSilenceRule(t *testing.T) {
	t.Parallel()
	heard := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name     string
		interval time.Duration
		age      time.Duration
		silent   bool
	}{
		{"every 1s, just heard", time.Second, 0, false},
		{"every 1s, missed one", time.Second, 1900 * time.Millisecond, false},
		{"every 1s, missed two but within the allowance", time.Second, 2900 * time.Millisecond, false},
		{"every 1s, missed two", time.Second, 3100 * time.Millisecond, true},
		{"every 10s, missed one", 10 * time.Second, 19 * time.Second, false},
		{"every 10s, missed two", 10 * time.Second, 22 * time.Second, true},
		{"every 1m, 30s unheard is no silence", time.Minute, 30 * time.Second, false},
		{"every 1m, missed two", time.Minute, 2*time.Minute + 2*time.Second, true},
		{"not said, 3s unheard", 0, 3100 * time.Millisecond, false},
		{"not said, 29s unheard", 0, 29 * time.Second, false},
		{"not said, 31s unheard", 0, 31 * time.Second, true},
	}
	for _, tt := range tests {
		if got := Silent(heard, heard.Add(tt.age), tt.interval); got != tt.silent {
			t.Errorf("%s: Silent after %s with interval %s = %v, want %v", tt.name, tt.age, tt.interval, got, tt.silent)
		}
	}
}

// TestStatusSilentByInterval: status applies the rule with the interval the
// node's heartbeat carried, shows the interval, and names it in the problem.
func TestStatusSilentByInterval(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", Protocol: spec.Protocol, IntervalMS: 1000}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Second)
	if res := statusOf(t, c); !res.AllClear || nodeStatus(res, "alpha").HeartbeatMS != 1000 {
		t.Fatalf("alpha beating every 1s, heard 2s ago: %+v", res)
	}
	clk.Add(2 * time.Second)
	res := statusOf(t, c)
	if st := nodeStatus(res, "alpha"); res.AllClear || !st.Silent {
		t.Fatalf("alpha beating every 1s, heard 4s ago: %+v", res)
	}
	if p := strings.Join(res.Problems, "\n"); !strings.Contains(p, "alpha has not been heard for 4s (it sends a heartbeat every 1s)") {
		t.Fatalf("problems %q", p)
	}
	shown, err := c.call(ctx, spec.NodeShow.Name, mustJSON(t, spec.NodeShowRequest{Name: "alpha"}))
	if err != nil {
		t.Fatal(err)
	}
	var show spec.NodeShowResult
	if err := spec.Decode(shown, &show); err != nil {
		t.Fatal(err)
	}
	if n := show.Node; n.HeartbeatMS != 1000 || n.SilentAfterMS != 3000 {
		t.Fatalf("node show: %+v", n)
	}
}

// TestStatusTellsNotes: a container the host started again is told in
// status, with why it had stopped, and is no problem: it runs again.
func TestStatusTellsNotes(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", Protocol: spec.Protocol, IntervalMS: 1000}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	note := "started again: it had exited with code 143 at 2026-05-01T11:59:59Z"
	body := mustJSON(t, spec.Report{Node: "alpha", Reconcile: true, Results: []spec.ResourceResult{
		{Name: "web:container:web", Kind: spec.KindContainer, Outcome: spec.Changed, Note: note}}})
	if err := db.RecordReport(ctx, store.Report{Node: "alpha", Body: body, Received: clk.Now()}, true); err != nil {
		t.Fatal(err)
	}
	res := statusOf(t, c)
	if notes := nodeStatus(res, "alpha").Notes; !res.AllClear || len(notes) != 1 || notes[0] != "web:container:web: "+note {
		t.Fatalf("status after a container was started again: %+v", res)
	}
	// Status is the whole mesh in one reply: a few notes a node, the rest
	// counted.
	var results []spec.ResourceResult
	for i := range spec.MaxStatusFailures + 2 {
		results = append(results, spec.ResourceResult{Name: fmt.Sprintf("m:container:c%d", i), Kind: spec.KindContainer, Outcome: spec.Changed, Note: note})
	}
	body = mustJSON(t, spec.Report{Node: "alpha", Reconcile: true, Results: results})
	if err := db.RecordReport(ctx, store.Report{Node: "alpha", Body: body, Received: clk.Now()}, true); err != nil {
		t.Fatal(err)
	}
	notes := nodeStatus(statusOf(t, c), "alpha").Notes
	if len(notes) != spec.MaxStatusFailures+1 || notes[len(notes)-1] != "…and 2 more: mesh node show alpha lists them" {
		t.Fatalf("status of a report with %d notes: %q", len(results), notes)
	}
}
