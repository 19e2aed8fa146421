package host

import (
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
)

// TestEdgeRestartedServesItsKeptCertificates: an edge made again on the
// storage of one that stopped, as a host's edge is when the host
// restarts, serves each public name at once with the certificate kept
// there: the same serial, and no new order at the CA (still up, and
// counting).
func TestEdgeRestartedServesItsKeptCertificates(t *testing.T) {
	t.Parallel()
	rig := newEdgeRig(t)
	backends := map[string]string{"keep.example.test": edgePage(t, "keep"), "kept.example.test": edgePage(t, "kept")}
	g := rig.edge(t, edgeRenew{}, backends)
	first := map[string]string{}
	for name := range backends {
		first[name] = rig.waitLeaf(t, name, 60*time.Second).SerialNumber.String()
	}
	orders, issued := rig.pb.Orders(t), rig.pb.Issued(t)
	if orders != len(backends) {
		t.Fatalf("pebble took %d orders for %d names, want one each", orders, len(backends))
	}
	g.stop()
	if _, err := rig.leaf("keep.example.test"); err == nil {
		t.Fatal("the stopped edge still answers")
	}

	restarted := time.Now()
	rig.edge(t, edgeRenew{}, backends)
	for name := range backends {
		if got := rig.waitLeaf(t, name, 5*time.Second).SerialNumber.String(); got != first[name] {
			t.Errorf("%s served with serial %s after the restart, want the kept %s", name, got, first[name])
		}
	}
	t.Logf("both names served again %s after the edge was made again", time.Since(restarted).Round(time.Millisecond))
	load := rig.load("keep.example.test", "keep")
	poll.Until(t, 10*time.Second, "a page through the restarted edge", func() (bool, string) {
		served, failed := load.state()
		return len(served) > 0, strings.Join(failed, "; ")
	})
	load.end()
	if n, m := rig.pb.Orders(t), rig.pb.Issued(t); n != orders || m != issued {
		t.Errorf("pebble took %d orders and issued %d certificates by the restart's end, want %d and %d as before it", n, m, orders, issued)
	}
}
