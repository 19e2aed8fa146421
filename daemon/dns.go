package daemon

import (
	"context"
	"fmt"
	"io"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/resolver"
)

// machineDNS is the machine's resolver for the whole of Mesh.Run: made
// and started by its first run, and kept answering, with the names it
// holds, across the runs a change of the controllers' peer set starts
// again, so the containers that resolve through it never go without.
type machineDNS struct {
	srv     *resolver.Server
	latency prometheus.Histogram
	stop    context.CancelFunc
	done    chan error // the resolver's Run ended, with its error
}

// resolver is the machine's resolver and the part of a run that stands
// for it: the first run's part starts it (held is the address a launcher
// bound, let go as it starts); every run's part fails the run if the
// resolver stops.
func (m *Mesh) resolver(cfg MeshConfig, held io.Closer) (*machineDNS, part, error) {
	if m.dns == nil {
		// The resolver's answers are timed on the controller's /metrics:
		// the machine's only HTTP listener.
		latency := mesh.NewResolverLatency()
		rc := cfg.Resolver
		rc.Latency = latency
		srv, err := resolver.New(rc, m.log.With("component", "resolver"))
		if err != nil {
			return nil, part{}, err
		}
		m.dns = &machineDNS{srv: srv, latency: latency}
	}
	d := m.dns
	run := func(ctx context.Context) error {
		if d.done == nil {
			rctx, stop := context.WithCancel(context.Background())
			d.stop, d.done = stop, make(chan error, 1)
			go func() { d.done <- d.srv.Run(rctx) }()
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-d.done:
			d.done <- err // for the next run, and the stop
			return fmt.Errorf("the resolver stopped: %w", err)
		}
	}
	return d, part{"resolver", run, d.srv.Ready(), held}, nil
}

// stopDNS stops the machine's resolver, once Mesh.Run's last run ended.
func (m *Mesh) stopDNS() error {
	if m.dns == nil || m.dns.done == nil {
		return nil
	}
	m.dns.stop()
	return <-m.dns.done
}
