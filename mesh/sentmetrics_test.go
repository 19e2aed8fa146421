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
