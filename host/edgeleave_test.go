package host

import (
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
)

// TestEdgeGivesUpANameThatLeavesTheRoster: a public name taken out of
// the roster is no longer served (a handshake for it fails at once) and
// no longer renewed: with short-lived certificates, the name that stays
// is renewed and the one that left is not, past the moment its renewal
// fell due, as Pebble's count of orders and certificates shows.
func TestEdgeGivesUpANameThatLeavesTheRoster(t *testing.T) {
	t.Parallel()
	rig := newEdgeRig(t, pebbletest.Validity(edgeShortLife))
	const stay, leave = "stay.example.test", "leave.example.test"
	backends := map[string]string{stay: edgePage(t, "stay"), leave: edgePage(t, "leave")}
	g := rig.edge(t, edgeShortRenew, backends)
	stayed := rig.waitLeaf(t, stay, 60*time.Second)
	left := rig.waitLeaf(t, leave, 60*time.Second)
	if n, m := rig.pb.Orders(t), rig.pb.Issued(t); n != 2 || m != 2 {
		t.Fatalf("pebble took %d orders and issued %d certificates for two names, want 2 and 2", n, m)
	}

	delete(backends, leave)
	g.take(edgeRoster(t, backends))
	if _, err := rig.leaf(leave); err == nil {
		t.Errorf("%s still served once it left the roster", leave)
	}
	if got := rig.waitLeaf(t, stay, 5*time.Second); got.SerialNumber.Cmp(stayed.SerialNumber) != 0 {
		t.Errorf("%s served with serial %s once the other name left, want %s", stay, got.SerialNumber, stayed.SerialNumber)
	}

	// The name that left would be renewed once it has edgeShortRenew's
	// share of its life left; a few of the edge's checks past that, and
	// past the renewal of the name that stays, it has not been.
	life := left.NotAfter.Sub(left.NotBefore)
	due := left.NotAfter.Add(-time.Duration(edgeShortRenew.window * float64(life)))
	past := due.Add(8 * edgeShortRenew.every)
	poll.Until(t, time.Until(past)+life, stay+" renewed, and "+leave+"'s renewal past due", func() error {
		got, err := rig.leaf(stay)
		renewed := err == nil && got.SerialNumber.Cmp(stayed.SerialNumber) != 0
		if renewed && time.Now().After(past) {
			return nil
		}
		return fmt.Errorf("%s renewed: %v (%v); %s's renewal due at %s",
			stay, renewed, err, leave, due.Format("15:04:05.000"))
	})
	if n, m := rig.pb.Orders(t), rig.pb.Issued(t); n != 3 || m != 3 {
		t.Errorf("pebble took %d orders and issued %d certificates, want 3 and 3: %s's renewal only", n, m, stay)
	}
	if _, err := rig.leaf(leave); err == nil {
		t.Errorf("%s served again after the renewals", leave)
	}
	t.Logf("%s renewed; %s checked %s past its renewal's due time", stay, leave, time.Since(due).Round(time.Millisecond))
}
