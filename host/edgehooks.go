package host

import (
	"context"
	"path/filepath"

	"github.com/mesh-fleet/mesh/spec"
)

// edgeRun is the host's edge beside the agent (a kindRun): it serves the
// held roster's public names while an edge resource configures it, keeps
// its certificates in the edges' bucket once the bus is reached, reports
// its state, and stops with the agent's run.
type edgeRun struct {
	edge *edge
	node string
}

// newEdgeRun is h's edge, serving nothing until configured.
func newEdgeRun(h kindHost) kindRun {
	return edgeRun{edge: newEdge(filepath.Join(h.dir, EdgeDir), h.caRoot, h.log), node: h.node}
}

// provide has edge resources configure this edge.
func (r edgeRun) provide(s *Services) { s.edge = r.edge }

// roster has the edge serve the public names of the roster held.
func (r edgeRun) roster(names spec.Roster) { r.edge.take(names) }

// wired has the edge keep its certificates in the edges' bucket over the
// bus, report its state until ctx ends, and run as the kept declaration
// says.
func (r edgeRun) wired(ctx context.Context, b kindBus) {
	r.edge.share(b.nc, b.sealKey)
	go b.safely("edge state", func() { newEdgeReporter(r.edge, r.node, b.nc).run(ctx) })
	r.serveKept(ctx, b.kept)
}

// stop closes the edge's listeners and stops renewing its certificates.
func (r edgeRun) stop() { r.edge.stop() }

// serveKept runs the edge the kept resources hold before the bus is
// reached, as the kept roster's names and overlay are: a host started
// while the controller is down serves its public names from the
// certificates it kept. The reconcile once the bus answers finds it
// running as declared, or changes it as a newer declaration says.
func (r edgeRun) serveKept(ctx context.Context, kept []spec.Resource) {
	for _, res := range kept {
		if res.Kind != spec.KindEdge {
			continue
		}
		e, err := (edgeApplier{edge: r.edge}).check(res)
		if err == nil {
			err = r.edge.configure(ctx, *e)
		}
		if err != nil {
			r.edge.log.Warn("the kept edge runs once the bus is reached and it is applied", "edge", res.Name, "err", err)
		}
		return
	}
}
