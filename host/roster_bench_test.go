package host

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// BenchmarkTakeRoster is what a host does with a roster message of N
// nodes, each serving a route: verify its signature, decode it strictly,
// judge it, and build the zone its resolver answers (state.json's write
// left out: it is the disk's).
//
//	go test -run '^$' -bench TakeRoster ./host
func BenchmarkTakeRoster(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			now := time.Now()
			doc := spec.RosterDoc{Mesh: "m", Seq: 2, Issued: now, Expires: now.Add(time.Hour), Protocol: spec.Protocol}
			for i := range n {
				node, addr := fmt.Sprintf("n%05d", i), fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
				doc.Names.Nodes = append(doc.Names.Nodes, spec.RosterNode{Name: node, Address: addr})
				doc.Names.Routes = append(doc.Names.Routes, spec.RosterRoute{Name: spec.RouteName("web", node), Node: node, Address: addr, Port: 80, Module: "web"})
			}
			raw, err := json.Marshal(doc)
			if err != nil {
				b.Fatal(err)
			}
			sig := ed25519.Sign(priv, raw)
			k := keptRoster{mesh: "m", seq: 1}
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				got, v, reason := verifyRoster(raw, sig, pub, k, now)
				if v != accept {
					b.Fatal(reason)
				}
				if z := zoneOf(got.Names); len(z.Names) != 2*n {
					b.Fatalf("%d names", len(z.Names))
				}
			}
			b.ReportMetric(float64(len(raw)), "roster-bytes")
		})
	}
}
