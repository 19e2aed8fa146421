package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/mesh-fleet/mesh/spec"
)

func init() {
	registerKind(hostKind{name: spec.KindEdge, run: newEdgeRun,
		applier: func(s *Services) Applier { return edgeApplier{edge: s.edge} }})
}

// EdgeDir is where an edge keeps its ACME account and certificates, under
// the host's directory (D/host/edge).
const EdgeDir = "edge"

var errNoEdge = errors.New("this host runs no edge (it serves public names only while it runs)")

// edgeApplier (re)configures the host's edge: the listeners and the
// certificates live in the edge, which outlives each apply; a resource
// only says how it runs, and removing it stops it.
type edgeApplier struct {
	edge *edge // nil: edges fail, saying so
}

// edgeOf is r's edge spec.
func edgeOf(r spec.Resource) (*spec.EdgeSpec, error) {
	e, ok := spec.As[*spec.EdgeSpec](r)
	if !ok || e == nil {
		return nil, fmt.Errorf("resource %q has no edge spec", r.Name)
	}
	return e, nil
}

// Plan says whether the edge runs as r says already.
func (a edgeApplier) Plan(_ context.Context, r spec.Resource) (Result, error) {
	e, err := a.check(r)
	if err != nil {
		return Result{}, err
	}
	return Result{Outcome: a.edge.outcome(*e)}, nil
}

// Apply has the edge run as r says: started when it is not, restarted
// when it runs otherwise.
func (a edgeApplier) Apply(ctx context.Context, r spec.Resource, w *Writes) (Result, error) {
	e, err := a.check(r)
	if err != nil {
		return Result{}, err
	}
	outcome := a.edge.outcome(*e)
	if outcome == spec.Unchanged {
		return Result{Outcome: outcome}, nil
	}
	w.add()
	if err := a.edge.configure(ctx, *e); err != nil {
		return Result{}, err
	}
	return Result{Outcome: outcome}, nil
}

// Remove stops the edge rec was, if it is the one running: its listeners
// close and its names are no longer renewed. The certificates stay in
// its storage, for an edge configured again.
func (a edgeApplier) Remove(_ context.Context, rec Applied, _ []string, w *Writes) (Result, error) {
	if a.edge != nil && a.edge.running(rec.Path) {
		w.add()
		a.edge.stop()
	}
	return Result{Outcome: spec.Removed}, nil
}

// check is r's edge spec, its values sound, on a host with an edge that
// runs no other.
func (a edgeApplier) check(r spec.Resource) (*spec.EdgeSpec, error) {
	e, err := edgeOf(r)
	if err != nil {
		return nil, err
	}
	if a.edge == nil {
		return nil, errNoEdge
	}
	if err := e.CheckValues(); err != nil {
		return nil, err
	}
	if other := a.edge.name(); other != "" && other != e.Name {
		return nil, fmt.Errorf("this host runs edge %q already: one edge a host", other)
	}
	return e, nil
}
