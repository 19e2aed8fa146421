package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// BenchmarkPushSend is the controller's side of a push to 50 nodes: compose,
// number, sign, record and publish each declaration (no host answers),
// forced since the content does not change between runs.
func BenchmarkPushSend(b *testing.B) { benchmarkPush(b, true) }

// BenchmarkPushUnchanged is a push to the same 50 nodes when nothing
// changed: compose and compare each node's digest, send nothing. Its peer
// is BenchmarkPushSend.
func BenchmarkPushUnchanged(b *testing.B) { benchmarkPush(b, false) }

func benchmarkPush(b *testing.B, force bool) {
	clk := &clock{now: time.Now()}
	c, db := newController(b, clk)
	ctx := context.Background()
	mod := spec.Module{Name: "m", Version: "1", Routes: []spec.Route{{Name: "web", Port: 80}}, Resources: []spec.Resource{resource("/srv")}}
	mod.Resources[0].Module, mod.Resources[0].Name = "m", spec.ResourceName("m", spec.KindDirectory, "/srv")
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
		b.Fatal(err)
	}
	for i := range 50 {
		name := fmt.Sprintf("n%02d", i)
		if err := db.AddNode(ctx, store.Node{Name: name, Address: "10.0.0.1", NKey: "U" + name, Joined: clk.Now()}); err != nil {
			b.Fatal(err)
		}
		if err := ensureConsumer(ctx, c.js, name); err != nil {
			b.Fatal(err)
		}
		if err := db.Assign(ctx, "m", name, nil, clk.Now()); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := c.push(ctx, spec.PushRequest{Force: force})
		if err != nil {
			b.Fatal(err)
		}
		if res.Nodes[0].Unchanged == force {
			b.Fatalf("push (force %v): %+v", force, res.Nodes[0])
		}
	}
}
