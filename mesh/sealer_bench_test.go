package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// BenchmarkPushSecrets is a push to 1,000 nodes in which every node's five
// values changed: as plain settings (secrets=0), its peer, and as secret
// settings (secrets=5), each value then sealed to its node. The
// difference over the 5,000 values is the controller's CPU per sealed
// value. unchanged= is a push after it that changes nothing: the sealed
// bytes are found again in each node's last declaration.
//
//	go test -run '^$' -bench PushSecrets -benchtime 5x ./mesh
func BenchmarkPushSecrets(b *testing.B) {
	for _, secret := range []bool{false, true} {
		b.Run(fmt.Sprintf("secrets=%d", map[bool]int{false: 0, true: 5}[secret]), func(b *testing.B) { benchmarkPushSecrets(b, 1000, secret, true) })
	}
	b.Run("secrets=5/unchanged", func(b *testing.B) { benchmarkPushSecrets(b, 1000, true, false) })
}

func benchmarkPushSecrets(b *testing.B, nodes int, secret, change bool) {
	clk := &clock{now: time.Now()}
	c, db := newController(b, clk)
	ctx := context.Background()
	mod := spec.Module{Name: "s", Version: "1"}
	for i := range 5 {
		name := fmt.Sprintf("v%d", i)
		mod.Settings = append(mod.Settings, spec.Setting{Name: name, Type: spec.TypeString, Secret: secret})
		content := []byte("value=${" + name + "}\n")
		path := "/etc/s/" + name
		mod.Resources = append(mod.Resources, spec.Resource{Name: spec.ResourceName("s", spec.KindFile, path), Kind: spec.KindFile, Module: "s",
			Spec: &spec.FileSpec{Path: path, Mode: 0o600, Content: content, Size: int64(len(content)), Digest: spec.ContentDigest(content)}})
	}
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
		b.Fatal(err)
	}
	names := []string{"alpha"}
	for i := 1; i < nodes; i++ {
		name := fmt.Sprintf("n%04d", i)
		if err := db.AddNode(ctx, store.Node{Name: name, Address: "10.0.0.1", NKey: "U" + name, SealKey: alphaSealKey.Public().String(), Joined: clk.Now()}); err != nil {
			b.Fatal(err)
		}
		names = append(names, name)
	}
	round := 0
	assignAll := func() {
		round++
		for _, name := range names {
			settings := map[string]string{}
			for i := range 5 {
				settings[fmt.Sprintf("v%d", i)] = fmt.Sprintf("%s-%d-%d-%032d", name, round, i, 0)
			}
			if err := c.deps.DB.Assign(ctx, "s", name, settings, clk.Now()); err != nil {
				b.Fatal(err)
			}
		}
	}
	assignAll()
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if change {
			b.StopTimer()
			assignAll()
			b.StartTimer()
		}
		res, err := c.push(ctx, spec.PushRequest{})
		if err != nil {
			b.Fatal(err)
		}
		for _, pn := range res.Nodes {
			if pn.Unchanged == change || pn.Error != "" {
				b.Fatalf("push (change %v): %+v", change, pn)
			}
		}
	}
}
