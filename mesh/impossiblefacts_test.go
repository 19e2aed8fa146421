package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// TestImpossibleFactsRefused: facts a machine cannot have (negative cores,
// an architecture holding a terminal sequence) are refused on receipt and
// the node keeps the facts it sent before; facts it can have are kept.
func TestImpossibleFactsRefused(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, _ := newController(t, clk)
	ctx := context.Background()
	send := func(f spec.Facts) {
		f.Node, f.Time = "alpha", clk.Now()
		c.onFacts(ctx, &nats.Msg{Subject: spec.NodeSubject("alpha", spec.KindFacts), Data: mustJSON(t, f)})
	}
	shown := func() spec.Facts {
		t.Helper()
		res, err := c.showNode(ctx, spec.NodeShowRequest{Name: "alpha"})
		if err != nil || res.Node.Facts == nil {
			t.Fatalf("node show alpha: %+v, %v", res.Node.Facts, err)
		}
		return *res.Node.Facts
	}
	send(spec.Facts{Arch: "amd64", OS: "linux", Kernel: "honest", Cores: 4})
	for _, bad := range []spec.Facts{
		{Arch: "amd64", OS: "linux", Kernel: "forged", Cores: -4},
		{Arch: "amd64\x1b[2K", OS: "linux", Kernel: "forged", Cores: 4},
		{Arch: "amd64", OS: "linux", Kernel: "forged", Cores: 4, DiskFree: 1 << 40},
	} {
		send(bad)
		if f := shown(); f.Kernel != "honest" || f.Cores != 4 || f.Arch != "amd64" {
			t.Fatalf("after facts %+v the node shows kernel %q, %d cores, arch %q: want the honest facts kept", bad, f.Kernel, f.Cores, f.Arch)
		}
	}
	send(spec.Facts{Arch: "arm64", OS: "linux", Kernel: "next", Cores: 8})
	if f := shown(); f.Kernel != "next" || f.Cores != 8 {
		t.Fatalf("facts a machine can have not kept: kernel %q, %d cores", f.Kernel, f.Cores)
	}
}
