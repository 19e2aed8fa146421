package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fleetHosts is how many simulated hosts TestFleetPastAThousand joins:
// past nats-server's default of 1,000 consumers on a stream, so a fleet
// that needed a consumer a node would fail here.
const fleetHosts = 1200

// TestFleetPastAThousand joins 1,200 simulated hosts to a real controller
// (past the 1,000-consumer wall nats-server puts on a stream by default),
// pushes a module to all of them, and has every one report it applied and
// hold the file; a second push that changes nothing sends nothing.
//
// The joins take minutes on two cores (each reads the store's nodes and
// swaps the bus's users, whose cost grows with the fleet: see
// docs/design.md's limits), so it runs when
// MESH_TEST_FLEET=1 asks for it, as .ci/run does; it is not parallel, so
// its load does not slow the tests that wait on deadlines.
func TestFleetPastAThousand(t *testing.T) {
	if os.Getenv("MESH_TEST_FLEET") != "1" {
		t.Skip("joins 1,200 hosts, minutes of work: MESH_TEST_FLEET=1 runs it (.ci/run sets it)")
	}
	if raceDetector {
		t.Skip("1,200 simulated hosts run more goroutines than the race detector allows (8,128); make test runs it")
	}
	f := newFleet(t, fleetHosts)
	t.Logf("%d hosts joined in %s, assigned in %s (state on tmpfs: %v)", fleetHosts, f.joined, f.assigned, f.shm)
	p := f.push(t, false)
	t.Logf("push: reply in %s, last report in %s", p.replied, p.last)
	if p.sent != fleetHosts+1 { // and the controller's own host
		t.Fatalf("the push sent to %d nodes, want %d", p.sent, fleetHosts+1)
	}
	if bad := p.failed(); len(bad) > 0 {
		t.Fatalf("%d nodes did not apply: %s", len(bad), strings.Join(bad[:min(len(bad), 5)], "; "))
	}
	for _, n := range []string{f.nodes[0], f.nodes[999], f.nodes[fleetHosts-1]} {
		body, err := os.ReadFile(filepath.Join(f.hostDir(n), "root", "etc", "motd"))
		if err != nil || string(body) != n+" at 1\n" {
			t.Errorf("%s's /etc/motd: %q, %v; want %q", n, body, err, n+" at 1\n")
		}
	}
	again := f.push(t, false)
	if again.sent != 0 {
		t.Errorf("a push that changed nothing sent to %d nodes", again.sent)
	}
}
