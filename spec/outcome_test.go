package spec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestPushAuditOutcome: a push is audited ok only when every node was sent
// its declaration or held it already; otherwise the nodes not sent are
// named by reason, "partial" when some were sent and "failed" when none.
func TestPushAuditOutcome(t *testing.T) {
	sent := spec.PushNode{Node: "a", Seq: 3}
	same := spec.PushNode{Node: "b", Seq: 2, Unchanged: true}
	busy := func(n string) spec.PushNode { return spec.PushNode{Node: n, Error: "the store is busy"} }
	held := spec.PushNode{Node: "e", Held: true, Error: "held"}
	for _, tc := range []struct {
		nodes []spec.PushNode
		want  string
	}{
		{[]spec.PushNode{sent, same}, "ok"},
		{nil, "ok"},
		{[]spec.PushNode{sent, busy("c"), held, busy("d")}, "partial: c, d (the store is busy); e (held)"},
		{[]spec.PushNode{busy("c"), busy("d")}, "failed: c, d (the store is busy)"},
	} {
		if got := (spec.PushResult{Nodes: tc.nodes}).AuditOutcome(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.nodes, got, tc.want)
		}
	}
	var many []spec.PushNode
	for i := range 25 {
		many = append(many, busy(fmt.Sprintf("n%02d", i)))
	}
	if got := (spec.PushResult{Nodes: many}).AuditOutcome(); !strings.HasSuffix(got, "n19 and 5 more (the store is busy)") {
		t.Errorf("25 nodes: %q, want 20 named and 5 counted", got)
	}
}
