package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// BenchmarkAssign is one assign (and the audit's reading of it) and its
// unassign, with 10 and with 10,000 modules registered: an assign reads what
// it needs, so the two should cost about the same (the ratio of the two is
// the figure).
func BenchmarkAssign(b *testing.B) {
	for _, n := range []int{10, 10_000} {
		b.Run(fmt.Sprintf("modules=%d", n), func(b *testing.B) {
			clk := &clock{now: time.Now()}
			c, db := newController(b, clk)
			ctx := context.Background()
			mods := make([]spec.Module, 0, n)
			for i := range n {
				mods = append(mods, dirModule(fmt.Sprintf("m%05d", i), fmt.Sprintf("/srv/m%05d", i)))
			}
			if _, err := db.RegisterModules(ctx, mods, clk.Now()); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				req := spec.AssignRequest{Module: mods[i%n].Name, Node: "alpha"}
				if _, err := c.assign(ctx, req); err != nil {
					b.Fatal(err)
				}
				c.assignArgs(ctx, mustJSON(b, req))
				if _, err := c.unassign(ctx, req); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
