package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestDeclarationsSentAreCounted: each declaration published counts once
// in mesh_declarations_sent_total and its signed body's bytes in
// mesh_declaration_bytes_total; a push that sends nothing counts nothing.
func TestDeclarationsSentAreCounted(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	bytes, sent := 0, 0
	for _, step := range []struct {
		force bool
		sent  int
	}{{false, 1}, {false, 1}, {true, 2}} {
		if _, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}, Force: step.force}); err != nil {
			t.Fatal(err)
		}
		if got := metric(t, c, "mesh_declarations_sent_total"); got != step.sent {
			t.Fatalf("after a push (force %v): mesh_declarations_sent_total = %d, want %d", step.force, got, step.sent)
		}
		d, err := db.LastDeclaration(ctx, "alpha")
		if err != nil {
			t.Fatal(err)
		}
		if step.sent > sent {
			bytes += len(d.Body)
		}
		sent = step.sent
		if got := metric(t, c, "mesh_declaration_bytes_total"); got != bytes {
			t.Fatalf("after a push (force %v): mesh_declaration_bytes_total = %d, want %d", step.force, got, bytes)
		}
	}
}

// TestRostersSentAreCounted: a roster message published (the delta that
// announces it, to a mesh of protocol-4 hosts) counts once in
// mesh_rosters_sent_total and its signed body's bytes in
// mesh_roster_bytes_total; a push that changes no name publishes none.
func TestRostersSentAreCounted(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	for range 2 {
		if _, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := db.LastRoster(ctx)
	if err != nil || r.Seq != 1 {
		t.Fatalf("the roster recorded: %d, %v; want 1", r.Seq, err)
	}
	if got := metric(t, c, "mesh_rosters_sent_total"); got != 1 {
		t.Errorf("after two pushes of one roster: mesh_rosters_sent_total = %d, want 1", got)
	}
	s, err := c.js.Stream(ctx, spec.DeclarationStream)
	if err != nil {
		t.Fatal(err)
	}
	delta, err := s.GetLastMsgForSubject(ctx, spec.RosterSubject)
	if err != nil {
		t.Fatal(err)
	}
	if delta.Header.Get(spec.RosterDeltaHeader) == "" {
		t.Fatalf("the roster went as %d bytes (headers %v), want the delta announcing it", len(delta.Data), delta.Header)
	}
	if got := metric(t, c, "mesh_roster_bytes_total"); got != len(delta.Data) {
		t.Errorf("mesh_roster_bytes_total = %d, want the delta's %d bytes", got, len(delta.Data))
	}
}
