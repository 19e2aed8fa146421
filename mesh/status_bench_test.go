package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// BenchmarkStatus is mesh status over 20 nodes, each sent a declaration of
// 300 resources that it applied: composing every node and comparing what
// would be sent with what was.
func BenchmarkStatus(b *testing.B) {
	clk := &clock{now: time.Now()}
	c, db := newController(b, clk)
	ctx := context.Background()
	mod := spec.Module{Name: "m", Version: "1", Routes: []spec.Route{{Name: "web", Port: 80}}}
	for i := range 300 {
		r := resource(fmt.Sprintf("/srv/d%03d", i))
		r.Name = spec.ResourceName("m", spec.KindDirectory, r.Target())
		mod.Resources = append(mod.Resources, r)
	}
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
		b.Fatal(err)
	}
	for i := range 20 {
		name := fmt.Sprintf("n%02d", i)
		if i > 0 {
			if err := db.AddNode(ctx, store.Node{Name: name, Address: "10.0.0.1", NKey: "U" + name, Joined: clk.Now()}); err != nil {
				b.Fatal(err)
			}
		} else {
			name = "alpha"
		}
		if err := db.Assign(ctx, "m", name, nil, clk.Now()); err != nil {
			b.Fatal(err)
		}
	}
	res, err := c.push(ctx, spec.PushRequest{})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range res.Nodes {
		if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: n.Node, AppliedSeq: n.Seq, Protocol: spec.Protocol}, clk.Now()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		st, err := c.status(ctx, spec.StatusRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if len(st.Nodes) != 20 {
			b.Fatalf("%d nodes", len(st.Nodes))
		}
		for _, n := range st.Nodes {
			if n.Pending {
				b.Fatalf("%s pending: %s", n.Node, n.PendingWhy)
			}
		}
	}
}
