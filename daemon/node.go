package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
)

// NodeConfig is a machine that runs a host and no controller: the host
// joined into Dir.
type NodeConfig struct {
	Dir      string      // the state directory
	Host     host.Config // Dir and Names are set by NewNode
	Resolver resolver.Config
	// HeldDNS is the resolver's address, bound by the caller to check it:
	// closed just before the resolver starts.
	HeldDNS io.Closer
}

// Node runs a host's machine: its resolver, then its host.
type Node struct {
	dir   string
	log   *slog.Logger
	dns   *resolver.Server
	held  io.Closer
	agent *host.Agent
	ready chan struct{}
}

// NewNode makes the machine's resolver and host from cfg, reading the
// host's state; it starts nothing.
func NewNode(cfg NodeConfig, log *slog.Logger) (*Node, error) {
	if cfg.Dir == "" {
		return nil, errors.New("a node needs its state directory")
	}
	dns, err := resolver.New(cfg.Resolver, log.With("component", "resolver"))
	if err != nil {
		return nil, err
	}
	cfg.Host.Dir, cfg.Host.Names = statedir.Host(cfg.Dir), dns
	agent, err := host.New(cfg.Host, log.With("component", "host"))
	if err != nil {
		return nil, fmt.Errorf("%w (join a mesh first: mesh host --dir %s --join TOKEN)", err, cfg.Dir)
	}
	return &Node{dir: cfg.Dir, log: log, dns: dns, held: cfg.HeldDNS, agent: agent, ready: make(chan struct{})}, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.agent.Node() }

// Ready is closed once the resolver and the host are ready and
// D/addrs.json names the resolver's address.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Run runs the resolver, then the host, until ctx ends or the node is
// removed from the mesh (an error that is host.ErrRemoved).
func (n *Node) Run(ctx context.Context) error {
	defer release(n.held)
	parts := []part{{"resolver", n.dns.Run, n.dns.Ready(), n.held}, {"host", n.agent.Run, n.agent.Ready(), nil}}
	return runInOrder(ctx, n.log, parts, func() error {
		if err := statedir.WriteAddrs(n.dir, spec.Addrs{DNS: n.dns.Addrs()[0]}); err != nil {
			return err
		}
		close(n.ready)
		n.log.Info("host running", "node", n.agent.Node(), "dns", n.dns.Addrs()[0])
		return nil
	})
}
