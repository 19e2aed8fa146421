package host

import (
	"context"
	"errors"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// sendHeartbeat publishes one heartbeat: the sequence applied, the host's
// version and protocol, the versions its launcher gave up on (read from
// launch.json at each heartbeat), and how often heartbeats come, from which the
// controller tells when this node is silent (two missed).
func (a *Agent) sendHeartbeat(nc *nats.Conn, version string) error {
	return publish(nc, spec.NodeSubject(a.state.Node, spec.KindHeartbeat), spec.Heartbeat{
		Node: a.state.Node, Time: time.Now().UTC(), AppliedSeq: a.appliedSeq.Load(),
		HostVersion: version, Protocol: spec.Protocol, IntervalMS: max(a.cfg.HeartbeatEvery.Milliseconds(), 1),
		RosterSeq: a.rosterSeq.Load(),
		Fallbacks: a.fallbacks(),
	})
}

// heartbeats sends a heartbeat every HeartbeatEvery, and one at once at
// each nudge (an apply finished), until ctx ends. It runs apart from the
// loop that applies: an apply that takes longer than two heartbeats (an
// image loaded, a container given 10 s to stop) must not make the node
// look silent.
func (a *Agent) heartbeats(ctx context.Context, nc *nats.Conn, version string, nudge <-chan struct{}) {
	tick := time.NewTicker(a.cfg.HeartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-nudge:
		}
		a.safely("heartbeat", func() {
			if err := a.sendHeartbeat(nc, version); err != nil && !errors.Is(err, nats.ErrConnectionReconnecting) {
				a.log.Warn("heartbeat not sent", "err", err)
			}
		})
	}
}

// nudgeHeartbeat has a heartbeat sent now, saying the sequence just applied.
func (a *Agent) nudgeHeartbeat() {
	select {
	case a.beatNow <- struct{}{}:
	default:
	}
}
