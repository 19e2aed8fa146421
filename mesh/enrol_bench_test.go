package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nkeys"
)

// BenchmarkJoin is one host joining a mesh of N nodes, the controller's
// side: token create, the enrolment (node recorded, its consumer made,
// its credential on the bus) and the token's user withdrawn. Each of these
// changes one bus user, so its ns/op should not grow with N.
//
//	go test -run '^$' -bench Join -benchtime 200x ./mesh
func BenchmarkJoin(b *testing.B) {
	for _, n := range []int{1000, 4000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			clk := &clock{now: time.Now()}
			c, db := newController(b, clk)
			ctx := context.Background()
			for i := 1; i < n; i++ {
				name := fmt.Sprintf("n%05d", i)
				if err := db.AddNode(ctx, store.Node{Name: name, Address: "10.0.0.1", NKey: benchUserKey(b), Joined: clk.Now()}); err != nil {
					b.Fatal(err)
				}
			}
			if err := c.enrolment.syncUsers(ctx); err != nil {
				b.Fatal(err)
			}
			for i := 0; b.Loop(); i++ {
				node := fmt.Sprintf("j%05d", i)
				res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: node})
				if err != nil {
					b.Fatal(err)
				}
				tok, _ := spec.ParseToken(res.Token)
				if _, err := c.enrolment.enrol(ctx, enrolRequest(b, tok, node)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchUserKey is a new user nkey's public key.
func benchUserKey(b *testing.B) string {
	kp, err := nkeys.CreateUser()
	if err != nil {
		b.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}
