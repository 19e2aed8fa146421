package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestHeartbeatFloodDelaysNoOtherNode: 200,000 heartbeats from beta's own
// credential (a flood drained in the order it came would have status
// call the healthy nodes silent for minutes) delay no other node's: alpha's next heartbeat is recorded within seconds of the flood,
// status names beta and what it sent, and /metrics counts the excess.
func TestHeartbeatFloodDelaysNoOtherNode(t *testing.T) {
	optin.NeedSlow(t, "sends 200,000 heartbeats")
	t.Parallel()
	m := newMesh(t, "--root", t.TempDir(), "--heartbeat", "500ms")
	betaDir, _ := join(t, m.token(t, "beta"), "--root", t.TempDir())
	nc, _, err := nodeConn(t, m, betaDir)
	if err != nil {
		t.Fatal(err)
	}
	const flood = 200_000
	received := m.metric(t, "mesh_heartbeats_total")
	began := time.Now()
	for i := range flood {
		hb, _ := json.Marshal(spec.Heartbeat{Node: "beta", Time: time.Now().UTC(), AppliedSeq: uint64(i % 3), Protocol: spec.Protocol})
		if err := nc.Publish(spec.NodeSubject("beta", spec.KindHeartbeat), hb); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	poll.Until(t, 30*time.Second, "the flood received", func() error {
		got := m.metric(t, "mesh_heartbeats_total") - received
		if got >= flood {
			return nil
		}
		return fmt.Errorf("%d of %d", got, flood)
	})
	drained := time.Now()
	t.Logf("%d heartbeats published in %s and received by %s after the first", flood, sent.Sub(began).Round(time.Millisecond), drained.Sub(began).Round(time.Millisecond))
	poll.Until(t, 5*time.Second, "alpha heard after the flood", func() error {
		return heardAfter(t, m.dir, "alpha", sent)
	})
	res, clear := statusOf(t, m.dir)
	if clear || !strings.Contains(strings.Join(res.Problems, "\n"), "beta sent") {
		t.Fatalf("status does not name the flooding node: %v", res.Problems)
	}
	for _, n := range res.Nodes {
		if n.Silent {
			t.Errorf("status calls %s silent during a flood from beta", n.Node)
		}
		if (n.Flooding != "") != (n.Node == "beta") {
			t.Errorf("status: %s flooding %q", n.Node, n.Flooding)
		}
	}
	// The controller lets 100 heartbeats a node through in each 10 s window
	// (mesh/heartbeats.go's floodBeats, floodWindow); every other is excess.
	// A loaded machine spreads the flood over more windows.
	windows := int(time.Since(began)/(10*time.Second)) + 2
	if excess := m.metric(t, "mesh_heartbeats_excess_total"); excess < flood-100*windows {
		t.Errorf("mesh_heartbeats_excess_total is %d after %d heartbeats over %d windows of 10 s", excess, flood, windows)
	}
}
