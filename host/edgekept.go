package host

import (
	"context"

	"github.com/mesh-fleet/mesh/spec"
)

// serveKeptEdge runs the edge the kept declaration holds before the bus
// is reached, as the kept roster's names and overlay are: a host started
// while the controller is down serves its public names from the
// certificates it kept. The reconcile once the bus answers finds it
// running as declared, or changes it as a newer declaration says.
func (a *Agent) serveKeptEdge(ctx context.Context) {
	if a.held == nil || a.edge == nil {
		return
	}
	for _, r := range a.held.decl.Resources {
		if r.Kind != spec.KindEdge {
			continue
		}
		e, err := (edgeApplier{edge: a.edge}).check(r)
		if err == nil {
			err = a.edge.configure(ctx, *e)
		}
		if err != nil {
			a.log.Warn("the kept edge runs once the bus is reached and it is applied", "edge", r.Name, "err", err)
		}
		return
	}
}
