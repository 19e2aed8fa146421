package host

import (
	"context"
	"log/slog"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// kindRun is what a kind keeps running beside the agent: for a kind whose
// resources configure something that outlives each apply and follows the
// held roster (the edge: its listeners and certificates). The kind
// registers how one is made (hostKind.run); the agent makes one a kind as
// it is made and takes every one through these steps, so that such a kind
// needs no line of its own in the agent.
type kindRun interface {
	// provide puts what the kind's applier takes in s: its field of
	// Services.
	provide(s *Services)
	// roster takes the names of the roster the host holds: the kept one
	// as the run starts, before the bus is reached, then each one kept.
	roster(names spec.Roster)
	// wired starts what goes over the bus, once the run reached it and
	// made its engine; what it starts ends with ctx.
	wired(ctx context.Context, b kindBus)
	// stop stops what the kind runs, as the agent's run ends.
	stop()
}

// kindHost is what a kindRun is made with: the host, as its agent is made.
type kindHost struct {
	dir    string // the host's directory, D/host
	node   string
	caRoot string // the mesh's root, PEM
	log    *slog.Logger
}

// kindBus is what a kindRun's wired step is handed.
type kindBus struct {
	nc *nats.Conn
	// sealKey opens what the controller sealed to this node; nil: none
	// kept.
	sealKey *seal.NodeKey
	// kept are the resources of the kept declaration; nil: none kept.
	kept []spec.Resource
	// safely runs f as what, a panic in it recovered, counted and logged
	// by the agent.
	safely func(what string, f func())
}

// kindRuns are an agent's kindRuns, in kindOrder's order.
type kindRuns []namedRun

// namedRun is one kind's kindRun, with the kind's name.
type namedRun struct {
	kind string
	run  kindRun
}

// newKindRuns makes the kindRun of every kind that registers one, in
// kindOrder's order.
func newKindRuns(h kindHost) kindRuns {
	var out kindRuns
	for _, l := range kindOrder {
		if k := hostKinds[l.kind]; k.run != nil {
			out = append(out, namedRun{kind: l.kind, run: k.run(h)})
		}
	}
	return out
}

// provide has each kind put its service in s.
func (rs kindRuns) provide(s *Services) {
	for _, r := range rs {
		r.run.provide(s)
	}
}

// roster hands each kind the names of the roster held.
func (rs kindRuns) roster(names spec.Roster) {
	for _, r := range rs {
		r.run.roster(names)
	}
}

// wired starts what each kind runs over the bus, each under b.safely as
// its kind.
func (rs kindRuns) wired(ctx context.Context, b kindBus) {
	for _, r := range rs {
		b.safely(r.kind, func() { r.run.wired(ctx, b) })
	}
}

// stop stops what each kind runs, in the reverse order.
func (rs kindRuns) stop() {
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i].run.stop()
	}
}

// resources are the resources of the declaration h holds; nil when h is
// nil (none kept).
func (h *held) resources() []spec.Resource {
	if h == nil {
		return nil
	}
	return h.decl.Resources
}
