package daemon

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/mesh"
	binary "github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// MeshConfig is a controller's machine: the mesh kept in Dir, run on Addrs.
type MeshConfig struct {
	Dir string // the state directory
	// Addrs are where the bus and the HTTP listener bind (a port 0 is
	// taken as given); the resolver binds where Resolver says.
	Addrs spec.Addrs
	// Advertise are the bus URLs join tokens carry.
	Advertise []string
	Host      host.Config // Dir, Names and Panics are set by Run
	Resolver  resolver.Config
	// StoreBusyTimeout is how long a store write waits for another
	// writer's lock before it fails; zero is the store's default.
	StoreBusyTimeout time.Duration
	// CertLifetime is how long a leaf signed for a node is valid; zero is
	// mesh.DefaultCertLifetime.
	CertLifetime time.Duration
	// Held are the bus's, the HTTP listener's and the resolver's
	// addresses, bound by the caller to check them.
	Held Held
	// LeaseTTL is how long the leader lease of a cluster of controllers
	// outlives its last renewal; zero is DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Pprof, when set, is the loopback address Go's profiles of the
	// process are served on (--pprof).
	Pprof string
}

// Mesh runs a controller's machine: store, CA, bus, resolver, controller
// and its own host.
type Mesh struct {
	cfg       MeshConfig
	log       *slog.Logger
	ready     chan struct{}
	readyOnce sync.Once
	addrs     spec.Addrs // where each part listens, once ready
	// dns is the machine's resolver, kept across runs (dns.go).
	dns *machineDNS
}

// NewMesh checks cfg; it starts nothing.
func NewMesh(cfg MeshConfig, log *slog.Logger) (*Mesh, error) {
	if cfg.Dir == "" {
		return nil, errors.New("a mesh needs its state directory")
	}
	if cfg.Addrs.Bus == "" || cfg.Addrs.HTTP == "" {
		return nil, fmt.Errorf("a mesh needs a bus and an HTTP address; got %+v", cfg.Addrs)
	}
	if len(cfg.Resolver.Listen) == 0 {
		return nil, errors.New("a mesh needs an address for its resolver")
	}
	return &Mesh{cfg: cfg, log: log, ready: make(chan struct{})}, nil
}

// Ready is closed once every part is ready and D/addrs.json is written.
func (m *Mesh) Ready() <-chan struct{} { return m.ready }

// Addrs is where the bus, the HTTP listener and the resolver listen, once
// Ready is closed.
func (m *Mesh) Addrs() spec.Addrs { return m.addrs }

// runOnce runs the mesh's parts in start order (CA, store, bus, journal,
// resolver, controller, host), each ready before the next starts, until ctx ends;
// then stops them in reverse, the store last.
func (m *Mesh) runOnce(ctx context.Context) error {
	cfg, log := m.cfg, m.log
	defer func() { release(cfg.Held.Bus); release(cfg.Held.HTTP); release(cfg.Held.DNS) }()
	ctlDir := statedir.Controller(cfg.Dir)
	cluster, err := ReadClusterState(cfg.Dir)
	if err != nil {
		return err
	}
	if cluster != nil && cluster.removedSelf() {
		return ErrRemoved
	}
	joins := joinsOf(cluster, cfg.Dir)

	auth, err := ca.Load(filepath.Join(ctlDir, mesh.CADir))
	if err != nil {
		return err
	}
	ctlKeys, err := mesh.NewKeys()
	if err != nil {
		return err
	}
	db, err := m.openStore(ctx, cluster, auth, ctlKeys)
	if err != nil {
		return err
	}
	defer db.Close()
	bus, err := m.newBus(ctx, db, auth, ctlKeys)
	if err != nil {
		return err
	}
	if joins != nil {
		joins.bus = bus
	}
	lead, truth := m.truth(cluster, db, bus, auth, ctlKeys)
	signKey, sealKey, err := m.controllerKeys(ctx, db)
	if err != nil {
		return err
	}
	machine, dnsPart, err := m.resolver(cfg, cfg.Held.DNS)
	if err != nil {
		return err
	}
	dns, latency := machine.srv, machine.latency
	// One count of recovered panics for the process: /metrics shows the
	// host's with the controller's.
	panics := new(atomic.Uint64)
	agent, err := m.ownAgent(dns, panics)
	if err != nil {
		return err
	}
	digest, err := binary.DigestKept("", statedir.ExecutableDigest(cfg.Dir))
	if err != nil {
		return fmt.Errorf("read the running binary's digest: %w", err)
	}
	ctlPart, ctlAddr, err := controllerPart(mesh.Config{
		Version:         digest,
		HTTPListen:      cfg.Addrs.HTTP,
		Keys:            ctlKeys,
		BusURLs:         cfg.Advertise,
		SignKey:         signKey,
		SealKey:         sealKey,
		Panics:          panics,
		ResolverLatency: latency,
		CertLifetime:    cfg.CertLifetime,
		Node:            agent.Node(),
		// The metrics token outlives a restart: only its hash is kept.
		MetricsTokenFile: filepath.Join(ctlDir, mesh.MetricsTokenFile),
		CrashFile:        filepath.Join(ctlDir, mesh.CrashFile),
		Parts:            []mesh.Part{{Name: "bus", Ready: bus.Ready()}, {Name: "resolver", Ready: dns.Ready()}, {Name: "host", Ready: agent.Ready()}},
		Joins:            joins.controllerJoins(),
		Replicas:         cluster.replicas(),
		Controllers:      cluster.controllers(cfg.Advertise),
	}, log.With("component", "controller"), mesh.Deps{DB: truth.Store(), CA: auth, Bus: bus}, lead, cfg.Held.HTTP)
	if err != nil {
		return err
	}

	parts := append(m.pprofParts(), part{"bus", bus.Run, bus.Ready(), cfg.Held.Bus})
	if lead != nil {
		parts = append(parts, lead.campaignPart())
	}
	parts = append(parts, part{"journal", truth.Run, truth.Ready(), nil})
	parts = append(parts, m.peersPart(cluster, bus, ctlKeys, joins)...)
	parts = append(parts, dnsPart, ctlPart, part{"host", ownHost(log, agent), agent.Ready(), nil})
	runErr := runInOrder(ctx, log, parts, func() error {
		addrs := cfg.Addrs
		addrs.Bus, addrs.HTTP, addrs.DNS = bus.Addr(), ctlAddr(), dns.Addrs()[0]
		return m.started(addrs, agent.Node())
	})
	if err := db.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("close store: %w", err)
	}
	return runErr
}

// openStore opens the controller's store, the view of its log on the bus:
// the streams a bus kept alone are dropped once it runs in a cluster, and
// a store with no view of the log is rebuilt first (rebuildStore).
func (m *Mesh) openStore(ctx context.Context, cluster *ClusterState, auth *ca.Authority, ctlKeys mesh.Keys) (*store.DB, error) {
	ctlDir := statedir.Controller(m.cfg.Dir)
	if dropped, err := dropStandalone(cluster, filepath.Join(ctlDir, mesh.JSDir), filepath.Join(ctlDir, mesh.PutBackFile)); err != nil {
		return nil, err
	} else if dropped {
		m.log.Info("the streams the bus kept alone are dropped: it runs in a cluster now, and the store's log begins again from the store")
	}
	dbPath := filepath.Join(ctlDir, mesh.DBFile)
	if err := m.rebuildStore(ctx, dbPath, auth, ctlKeys, cluster); err != nil {
		return nil, err
	}
	return store.OpenWith(ctx, dbPath, store.Options{BusyTimeout: m.cfg.StoreBusyTimeout, ViewOfLog: true})
}

// truth is the controller's store, read from db and written through the
// log on the bus, which db is a view of; and, with two controllers or
// more, the leadership that says which one of them runs the controller
// and writes the log (leader.go), nil for a controller alone.
func (m *Mesh) truth(cluster *ClusterState, db *store.DB, bus *broker.Server, auth *ca.Authority, ctlKeys mesh.Keys) (*leadership, *journal.Journal) {
	log, ctlDir := m.log, statedir.Controller(m.cfg.Dir)
	lead := newLeadership(cluster, m.cfg.LeaseTTL, log.With("component", "lease"), auth, busConnect(bus, ctlKeys.Full))
	truth := journal.New(journal.Config{PutBackMark: filepath.Join(ctlDir, mesh.PutBackFile),
		Follow: cluster.follows(), Replicas: cluster.replicas(), Clustered: cluster.clustered(), Fence: fenceOf(lead)},
		log.With("component", "journal"), db, busConnect(bus, ctlKeys.Full))
	if lead != nil {
		lead.truth = truth
		lead.syncUsers = followerUsers(db, bus, ctlKeys)
	}
	return lead, truth
}

// controllerKeys are the controller's signing key and its at-rest key,
// the latter made when the mesh had none (LoadSealKey).
func (m *Mesh) controllerKeys(ctx context.Context, db *store.DB) (ed25519.PrivateKey, *seal.RestKey, error) {
	ctlDir := statedir.Controller(m.cfg.Dir)
	signKey, err := mesh.LoadSignKey(ctlDir)
	if err != nil {
		return nil, nil, err
	}
	sealKey, created, err := mesh.LoadSealKey(ctx, ctlDir, db)
	if err != nil {
		return nil, nil, err
	}
	if created {
		m.log.Info("at-rest key made for a mesh that had none", "path", filepath.Join(ctlDir, mesh.SealKeyFile))
	}
	return signKey, sealKey, nil
}

// ownAgent is the host of the controller's machine: its names are the
// machine's resolver's, and its panics counted with the controller's.
func (m *Mesh) ownAgent(dns *resolver.Server, panics *atomic.Uint64) (*host.Agent, error) {
	hostCfg := m.cfg.Host
	hostCfg.Dir = statedir.Host(m.cfg.Dir)
	hostCfg.Names = dns
	hostCfg.Panics = panics
	// Its bus is this process's: the roster's controllers are for hosts
	// that reach the bus over the network.
	hostCfg.KeepBus = true
	return host.New(hostCfg, m.log.With("component", "host"))
}

// pprofParts is the part that serves Go's profiles of the process, when
// the configuration asks for it (--pprof); none otherwise.
func (m *Mesh) pprofParts() []part {
	if m.cfg.Pprof == "" {
		return nil
	}
	prof := newProfiler(m.cfg.Pprof, m.log.With("component", "pprof"))
	return []part{{"pprof", prof.Run, prof.ready, nil}}
}

// started writes where each part listens to D/addrs.json, and says the
// mesh is ready.
func (m *Mesh) started(addrs spec.Addrs, node string) error {
	if err := statedir.WriteAddrs(m.cfg.Dir, addrs); err != nil {
		return err
	}
	m.addrs = addrs
	m.readyOnce.Do(func() { close(m.ready) })
	m.log.Info("mesh ready", "bus", addrs.Bus, "http", addrs.HTTP, "dns", addrs.DNS, "node", node)
	return nil
}

// newBus makes the bus, not started: its certificate issued by auth for
// the bus's address, its users the store's nodes and the controller's
// keys.
func (m *Mesh) newBus(ctx context.Context, db *store.DB, auth *ca.Authority, ctlKeys mesh.Keys) (*broker.Server, error) {
	cfg := m.cfg
	busHost, _, _ := net.SplitHostPort(cfg.Addrs.Bus)
	cert, err := auth.IssueServer(busNames(), busIPs(busHost), 365*24*time.Hour)
	if err != nil {
		return nil, err
	}
	users, err := mesh.Users(ctx, db, ctlKeys, time.Now())
	if err != nil {
		return nil, err
	}
	cluster, err := busCluster(cfg.Dir, auth)
	if err != nil {
		return nil, err
	}
	return broker.New(broker.Config{
		Listen:   cfg.Addrs.Bus,
		StoreDir: filepath.Join(statedir.Controller(cfg.Dir), mesh.JSDir),
		TLS:      &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Users:    users,
		Cluster:  cluster,
	}, m.log.With("component", "bus"))
}

// ownHost runs the host of a controller's machine. Its node cannot be
// removed (the controller refuses), but one removed before that was refused
// must not take the controller and the bus down with it: the controller
// serves on without a host.
func ownHost(log *slog.Logger, agent *host.Agent) func(context.Context) error {
	return func(ctx context.Context) error {
		err := agent.Run(ctx)
		if !errors.Is(err, host.ErrRemoved) {
			return err
		}
		log.Error("this machine's own node was removed from the mesh; the controller serves on without a host", "node", agent.Node())
		<-ctx.Done()
		return nil
	}
}

// recover turns a run of a clustered controller that failed into one run
// again, after a pause, rather than a process gone: a cluster in flux (a
// peer restarting, JetStream electing) fails a part for a moment. A view
// behind its log's compaction is removed first: it is rebuilt from the
// log as the run begins. A controller alone fails as it always did.
func (m *Mesh) recover(ctx context.Context, cluster *ClusterState, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil // stopped while it started: a part was cut short
	}
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrRestart) || errors.Is(err, ErrRemoved) {
		return err
	}
	if errors.Is(err, journal.ErrBehind) {
		path := filepath.Join(statedir.Controller(m.cfg.Dir), mesh.DBFile)
		for _, suffix := range []string{"", "-wal", "-shm"} {
			if rerr := os.Remove(path + suffix); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				return fmt.Errorf("remove a store behind its log: %w (after: %w)", rerr, err)
			}
		}
		m.log.Warn("the store was behind its log's compaction: it is rebuilt from the log", "err", err)
		return fmt.Errorf("%w: %w", ErrRestart, err)
	}
	if !cluster.clustered() {
		return err
	}
	m.log.Error("a part of the controller failed in its cluster: the mesh starts again", "err", err)
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(failedRunPause):
	}
	return fmt.Errorf("%w: %w", ErrRestart, err)
}

// failedRunPause is how long a clustered controller whose run failed
// waits before it runs again.
const failedRunPause = 2 * time.Second
