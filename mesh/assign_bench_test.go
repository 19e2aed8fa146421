package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// BenchmarkAssign is one assign (and the audit's reading of it) and its
// unassign, with 10 and with 10,000 modules registered, and with 2,000
// nodes joined (their facts recorded) besides the controller's own: an
// assign reads what it needs, so each should cost about what the first
// does (the ratios are the figures).
func BenchmarkAssign(b *testing.B) {
	for _, tc := range []struct{ n, nodes int }{{10, 0}, {10_000, 0}, {10, 2000}} {
		n := tc.n
		b.Run(fmt.Sprintf("modules=%d,nodes=%d", n, tc.nodes+1), func(b *testing.B) {
			clk := &clock{now: time.Now()}
			c, db := newController(b, clk)
			ctx := context.Background()
			for i := range tc.nodes {
				name := fmt.Sprintf("n%d", i)
				if err := db.AddNode(ctx, store.Node{Name: name, Address: "127.0.0.1", NKey: "U" + name, Joined: clk.Now()}); err != nil {
					b.Fatal(err)
				}
				f := spec.Facts{Node: name, Arch: "amd64", OS: "linux", Kernel: "6.1.0-28-amd64", Distro: "debian", DistroVer: "12",
					CPUModel: "AMD EPYC 9654 96-Core Processor", Cores: 96, Hostname: name, Capabilities: []string{spec.CapContainers}}
				if err := db.RecordFacts(ctx, f, clk.Now()); err != nil {
					b.Fatal(err)
				}
			}
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
				if _, err := c.modules.assign(ctx, req); err != nil {
					b.Fatal(err)
				}
				assignArgs(c.deps.DB, ctx, mustJSON(b, req))
				if _, err := c.modules.unassign(ctx, req); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
