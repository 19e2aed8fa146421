package host

import (
	"context"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// engineWatch follows the container engine for the host: whether it
// answers, and what its events say of the node's containers (the stops
// the host did not cause), which the passes they ask for tell in their
// results.
type engineWatch struct {
	// docker is the engine (nil: none, and nothing is followed), node the
	// node whose containers are followed, subnet its container network.
	docker *Docker
	node   string
	subnet netip.Prefix
	// every is how often the engine is checked (the heartbeat's pace).
	every time.Duration
	log   *slog.Logger
	// safely runs what the watch starts under the agent's catch.
	safely func(what string, f func())
	// stops are what the engine's events said of the node's containers;
	// kicks ask for a pass because of them, and recheck is the pass due
	// when a container that keeps stopping may clear.
	stops   stops
	kicks   chan struct{}
	recheck *time.Timer
	// up is whether the engine answered when the facts were last
	// gathered.
	up atomic.Bool
}

// facts adds the host's capabilities to f: binaries always (it holds
// the binary kind), containers only while the engine answers.
func (w *engineWatch) facts(ctx context.Context, f *spec.Facts) {
	f.Capabilities = []string{spec.CapBinaries}
	if w.docker == nil {
		return
	}
	v, err := w.docker.Version(ctx)
	w.up.Store(err == nil)
	if err != nil {
		f.Errors = append(f.Errors, "container engine: "+err.Error())
		return
	}
	f.Capabilities = append(f.Capabilities, spec.CapContainers)
	f.Engine, f.Subnet = v, w.subnet.Masked().String()
}

// watch checks the container engine at the heartbeat's pace and
// signals flips while it answers otherwise than the facts last sent say
// (compared with those, not with its own first look, so that an engine
// stopping between the facts and that look is not missed), until ctx ends.
func (w *engineWatch) watch(ctx context.Context, flips chan<- struct{}) {
	if w.docker == nil {
		return
	}
	answers := func() bool { return w.docker.Ping(ctx) == nil }
	up := w.up.Load()
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := answers()
		if ctx.Err() != nil {
			return
		}
		if now != up {
			up = now
			w.log.Info("container engine "+map[bool]string{true: "answers", false: "stopped answering"}[up], "engine", w.docker.Endpoint())
		}
		if now != w.up.Load() {
			nudge(flips)
		}
	}
}
