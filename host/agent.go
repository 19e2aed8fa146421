package host

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Config is what the agent needs.
type Config struct {
	// Dir is the host's directory (D/host), holding its state and credential.
	Dir string
	// HeartbeatEvery and FactsEvery are how often the agent reports; zero
	// means every 10 s and daily.
	HeartbeatEvery time.Duration
	FactsEvery     time.Duration
	// Executable is the running binary, whose SHA-256 is the host version;
	// empty means os.Executable.
	Executable string
	// Root is where declared paths resolve: "/" on a machine, a temporary
	// directory in tests. Empty means "/".
	Root string
	// ReconcileEvery is how often the kept declaration is applied again to
	// correct drift; zero means every 5 minutes.
	ReconcileEvery time.Duration
	// Names receives the mesh's names from every declaration kept: the
	// machine's resolver. Nil: names are kept but served by nothing.
	Names Names
	// Docker is the container engine; nil: container and network resources
	// fail, and the host does not report the containers capability.
	Docker *Docker
	// Subnet is the node's container network; zero means DefaultSubnet.
	Subnet netip.Prefix
	// CertRenewCheck is how often certmagic looks for certificates to
	// renew; zero means its default, every 10 minutes.
	CertRenewCheck time.Duration
	// Launched says that a stand-aside ends this process for a launcher:
	// one runs it (mesh serve, handed spec.ReadyFDEnv), or it is genesis,
	// which hands over to one. After an apply, when the version the node
	// wants is delivered and is not the one running, Run returns
	// ErrStandAside. Otherwise the host says that the version waits, and
	// runs on.
	Launched bool
	// Panics counts the panics recovered in the agent; main shares it with
	// the controller's /metrics on a controller's machine. Nil: its own.
	Panics *atomic.Uint64
	// ReportRetry is how long a report waits for the controller's answer
	// before it is sent again; zero means 30 s.
	ReportRetry time.Duration
	// Overlay is the host's part in the overlay, as its flags say.
	Overlay OverlayConfig
	// KeepBus keeps the bus addresses the host's state holds: the host of
	// a controller's own machine, in its process, reaches that
	// controller's bus alone; any other host takes the controllers' bus
	// URLs the roster carries (takeControllers).
	KeepBus bool
	// Rosters, when set, is shared by the hosts of one process (the fleet
	// benchmark's simulated hosts) so that each roster is held once; nil,
	// as for every real host: this one holds its own.
	Rosters *RosterPool
}

// Agent is the host's agent.
type Agent struct {
	cfg   Config
	log   *slog.Logger
	ready chan struct{}

	state State
	key   nkeys.KeyPair
	// sealKey opens what the controller sealed to this node; nil when the
	// host keeps none (seal.NodeKeyFile), and then a sealed file fails
	// saying so.
	sealKey *seal.NodeKey
	// kinds are what the kinds keep running beside the agent (kindRun).
	kinds kindRuns
	// overlay is the overlay's interface, as the held roster says; nil
	// when the host keeps no WireGuard key.
	overlay *overlayRun
	engine  *Engine
	// held is the kept declaration, decoded once (nil: none kept, or, with
	// heldErr saying why, the kept bytes do not decode).
	held    *held
	heldErr error
	// roster is the kept roster message, decoded once (nil: none kept,
	// or, with rosterErr saying why, the kept bytes do not decode).
	roster    *heldRoster
	rosterErr error
	// served is the source (as names says it) of the names the resolver
	// was last handed: they are handed again only when it changes.
	served string
	// waiting is the last declaration that named a roster the host has
	// not got: handled again as soon as a roster is taken. waitSaid is the
	// sequence of the last one whose wait was logged and reported.
	waiting  *nats.Msg
	waitSaid uint64
	// unkeptSaid is the last declaration (its sequence and the cause) the
	// host reported it could not keep.
	unkeptSaid string
	// askAt is the moment drawn to ask for the roster in force, which
	// a delta announced on a base this host does not hold (zero: none
	// drawn); askWant is the roster sequence that delta announced.
	askAt   time.Time
	askWant uint64
	// askWindow is the window the last delta gave, and askBackoff the one
	// the next ask after a failed one is drawn within (askAgain).
	askWindow, askBackoff time.Duration
	// retry fires at retryAt (zero: not armed) for what the host does
	// again by itself, since nothing delivers a republished message
	// again: ask for the roster a delta announced (askWant), handle the
	// declaration waiting for its roster again, ask for the last
	// declaration when one could not be kept (refetch), apply the kept
	// declaration again after a failure from outside (healing). See
	// catchup.go.
	// Read and written by the delivery loop only.
	retry   *time.Timer
	retryAt time.Time
	refetch bool
	// catchUp has the host ask for the roster in force and its node's last
	// declaration, naming those it holds: each time it connects to the
	// bus, since what was published while it was away is not delivered
	// again.
	catchUp chan struct{}
	// rosterSeq is the kept roster's sequence, for the heartbeats.
	rosterSeq atomic.Uint64
	// handledSeq is the highest stream sequence of a republished message
	// the delivery loop handled (handleBatch).
	handledSeq atomic.Uint64
	// savedAppliedSeq is the applied sequence state.json holds, and
	// recordUnsaved says that the record of what was applied changed
	// since state.json was last written (or a write of it failed).
	savedAppliedSeq uint64
	recordUnsaved   bool
	// decode decodes the declarations received, writeState writes
	// state.json and writeRoster RosterFile: spec.Decode, WriteState and
	// WriteRoster, wrapped by tests that count.
	decode      func(data []byte, v any) error
	writeState  func(dir string, st State) error
	writeRoster func(dir string, raw, sig []byte) error
	// reports sends the reports and sends the last one again until the
	// controller answers it.
	reports *reporter
	// healing is when the kept declaration is applied again after a pass
	// that failed for a cause outside the node (heal.go).
	healing healing
	// lastFailures are the failures of the last apply, so a reconcile pass
	// that fails the same way again says nothing new.
	lastFailures string
	// reported is set once this run has reported an apply: the first
	// reconcile of a run reports even when it changed nothing, since what
	// the controller last heard may be a failure from before the restart.
	reported bool
	// appliedSeq is state.AppliedSeq, for the heartbeats sent apart from
	// the loop that applies; beatNow has one sent at once.
	appliedSeq atomic.Uint64
	beatNow    chan struct{}
	// factsNow has the facts sent again at once: an apply installed or
	// removed the mesh root in the trust store (trust_installed).
	factsNow chan struct{}
	// watch follows the container engine: whether it answers, what its
	// events say of the node's containers.
	watch *engineWatch
	// root is the mesh's root the host pinned, read and checked against
	// its pin when Run starts; chain is the CA chain the host holds
	// (state.CAChain, checked against root), the one that signs first:
	// read apart from the loop, by the bus's TLS at each handshake.
	root  *x509.Certificate
	chain atomic.Pointer[[]*x509.Certificate]
	// launchErr is the last failure to read the launcher's record, said
	// once; versionWaits is the wanted version said to wait (no launcher);
	// badWant the last want file said to name no version.
	launchErr    atomic.Pointer[string]
	versionWaits string
	badWant      string
}

// New reads the host's state and credential and starts nothing.
func New(cfg Config, log *slog.Logger) (*Agent, error) {
	st, seed, err := ReadState(cfg.Dir)
	if err != nil {
		return nil, err
	}
	key, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("node credential in %s: %w", cfg.Dir, err)
	}
	if len(st.Bus) == 0 {
		return nil, fmt.Errorf("host state in %s names no bus address", cfg.Dir)
	}
	sealKey, err := loadSealKey(cfg.Dir)
	if err != nil {
		return nil, err
	}
	ov, err := loadOverlay(cfg.Dir, st.Node, cfg.Overlay, log)
	if err != nil {
		return nil, err
	}
	if cfg.HeartbeatEvery <= 0 {
		cfg.HeartbeatEvery = 10 * time.Second
	}
	if cfg.FactsEvery <= 0 {
		cfg.FactsEvery = 24 * time.Hour
	}
	if cfg.ReconcileEvery <= 0 {
		cfg.ReconcileEvery = 5 * time.Minute
	}
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	if cfg.ReportRetry <= 0 {
		cfg.ReportRetry = reportRetry
	}
	if cfg.Panics == nil {
		cfg.Panics = new(atomic.Uint64)
	}
	if cfg.Subnet, err = containerSubnet(cfg.Subnet); err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, log: log, ready: make(chan struct{}), state: st, key: key, sealKey: sealKey, overlay: ov, beatNow: make(chan struct{}, 1), factsNow: make(chan struct{}, 1), catchUp: make(chan struct{}, 1),
		savedAppliedSeq: st.AppliedSeq, decode: spec.Decode, writeState: WriteState, writeRoster: WriteRoster}
	a.healing.most = cfg.ReconcileEvery
	a.kinds = newKindRuns(kindHost{dir: cfg.Dir, node: st.Node, caRoot: st.CARoot, log: log})
	a.reports = &reporter{node: st.Node, log: log, retry: cfg.ReportRetry, arm: a.arm}
	a.watch = &engineWatch{docker: cfg.Docker, node: st.Node, subnet: cfg.Subnet, every: cfg.HeartbeatEvery, log: log, safely: a.safely, kicks: make(chan struct{}, 1)}
	a.appliedSeq.Store(st.AppliedSeq)
	if len(st.Declaration) > 0 {
		var decl spec.Declaration
		if err := spec.Decode(st.Declaration, &decl); err != nil {
			a.heldErr = fmt.Errorf("the kept declaration %d in %s does not decode: %w", st.Seq, cfg.Dir, err)
		} else {
			a.held = &held{decl: decl, raw: st.Declaration, digest: spec.ContentDigest(st.Declaration)}
		}
	}
	if len(st.Roster) > 0 {
		var doc spec.RosterDoc
		if err := spec.Decode(st.Roster, &doc); err != nil {
			a.rosterErr = fmt.Errorf("the kept roster in %s does not decode: %w", cfg.Dir, err)
		} else {
			a.roster = cfg.Rosters.share(&heldRoster{doc: doc, raw: st.Roster, digest: spec.ContentDigest(st.Roster)})
			a.state.Roster = a.roster.raw
			a.rosterSeq.Store(doc.Seq)
			// The controllers the kept roster names are dialed, should
			// state.json have missed them.
			if urls, err := controllersOf(doc); urls != nil && err == nil && !cfg.KeepBus {
				a.state.Bus = slices.Clone(urls)
			}
		}
	}
	// The resolver serves the names kept from the first query it answers,
	// before the bus is reached: one handed its sockets by a launcher
	// answers the queries that waited while the last process stood aside,
	// and must not answer them from an empty zone.
	a.serveNames()
	return a, nil
}

// Node is the node this agent is.
func (a *Agent) Node() string { return a.state.Node }

// Intermediates are the mesh's intermediates the host holds, the one that
// signs first: the CA chain its last declaration carried, checked against
// the pinned root (none before one did, or before Run). Where the host
// checks a chain (the bus's certificate, a ca.Issuer's answer), these are
// held beside the root. Safe to call from any goroutine.
func (a *Agent) Intermediates() []*x509.Certificate {
	if p := a.chain.Load(); p != nil {
		return *p
	}
	return nil
}

// Ready is closed once the agent's first heartbeat reached the bus.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// Run connects to the bus (reconnecting for ever) and reports until ctx
// ends, or until the bus refuses the node's credential for good: then it
// returns ErrRemoved.
func (a *Agent) Run(ctx context.Context) error {
	// What Run starts beside its loop (heartbeats, the engine's events)
	// ends with it, a removal included.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Whatever ends the run, what was applied is written if it is not yet.
	defer a.saveApplied()
	version, err := release.Digest(a.cfg.Executable)
	if err != nil {
		return err
	}
	root, err := a.holdRoot()
	if err != nil {
		return err
	}
	// The overlay the kept roster asks for is up before the bus is
	// reached (the bus is on the controller's own address), and goes when
	// the run ends: a removal, or the process stopping.
	if a.roster != nil {
		a.safely("overlay", func() { a.overlay.take(ctx, a.roster.doc.Names) })
	}
	defer a.overlay.stop()
	// What the kinds run beside the agent takes the kept roster before
	// the bus is reached, and stops with the run.
	if a.roster != nil {
		a.kinds.roster(a.roster.doc.Names)
	}
	defer a.kinds.stop()
	nc, err := a.dial(root)
	if err != nil {
		return err
	}
	defer nc.Close()
	removed, stopWatching := a.watchRemoval(nc)
	defer stopWatching()
	certs := a.wire(nc, root)
	defer certs.stop()
	a.kinds.wired(ctx, kindBus{nc: nc, sealKey: a.sealKey, kept: a.held.resources(), safely: a.safely})
	in, err := a.subscribe(nc)
	defer in.unsubscribe()
	if err != nil {
		return err
	}
	a.retry = time.NewTimer(time.Hour)
	a.retry.Stop()
	defer a.retry.Stop()
	return a.loop(ctx, nc, version, removed, certs.renewed, in)
}

// holdRoot reads the mesh's root from the host's state, checks it against
// its pin and holds it, with the kept CA chain it checks (one that fails
// is not held: the next declaration's is).
func (a *Agent) holdRoot() (*x509.Certificate, error) {
	root, err := ca.ParseCert([]byte(a.state.CARoot))
	if err != nil {
		return nil, fmt.Errorf("the mesh root in the host state: %w", err)
	}
	if ca.Pin(root) != a.state.CAPin {
		return nil, fmt.Errorf("the mesh root in the host state does not match its pin %s", a.state.CAPin)
	}
	a.root = root
	if a.state.CAChain != "" {
		chain, err := ca.ParseChain([]byte(a.state.CAChain), root, time.Now())
		if err != nil {
			a.log.Warn("the kept CA chain is not held: the next declaration's is", "err", err)
		} else {
			a.chain.Store(&chain)
		}
	}
	return root, nil
}

// dial connects to the bus as the node, over TLS checked against root,
// reconnecting for ever (the first connect included).
func (a *Agent) dial(root *x509.Certificate) (*nats.Conn, error) {
	pub, _ := a.key.PublicKey()
	nc, err := nats.Connect(strings.Join(a.state.Bus, ","),
		nats.Name("host "+a.state.Node),
		nats.Nkey(pub, a.key.Sign),
		nats.Secure(ca.HeldTLS(root, spec.BusTLSName, a.Intermediates)),
		nats.TLSHandshakeFirst(),
		nats.CustomInboxPrefix(spec.NodeInbox(a.state.Node)),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectWait),
		nats.Timeout(busTimeout),
		nats.SetCustomDialer(newBusDialer()),
		nats.RetryOnFailedConnect(true),
		// A write to the bus that timed out leaves the connection's
		// writer failed for good: every later heartbeat and report fails
		// the same way until the server notices, minutes later, and the
		// host is silent meanwhile. A new connection at once, and the
		// catch-up sends the last report again.
		nats.ReconnectOnFlusherError(),
		// A server stopped but not closed (a paused controller) keeps
		// the connection open: unanswered pings end it within
		// busPingEvery × busPingsOut, and the host goes to another.
		nats.PingInterval(busPingEvery),
		nats.MaxPingsOutstanding(busPingsOut),
		nats.IgnoreAuthErrorAbort(), // watchRemoval decides (removed.go)
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				a.log.Warn("bus connection lost", "err", err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			a.log.Warn("bus error", "err", err)
			// A message dropped here is not delivered again.
			if errors.Is(err, nats.ErrSlowConsumer) && sub != nil && (sub.Subject == spec.RosterDelivery || sub.Subject == spec.DeclarationDelivery(a.state.Node)) {
				nudge(a.catchUp)
			}
		}),
		// Back on the bus: heard at once, not at the next heartbeat (a
		// restarted controller hears its fleet within their reconnects'
		// spread).
		nats.ReconnectHandler(func(nc *nats.Conn) {
			a.log.Info("bus connection back", "url", nc.ConnectedUrl())
			a.nudgeHeartbeat()
			nudge(a.catchUp)
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("connect to the bus at %v: %w", a.state.Bus, err)
	}
	return nc, nil
}

// wire makes the engine the host applies with, over nc, and the
// certificate manager it keeps certificates with, which the caller stops
// before nc closes: certmagic over the host's own storage, its CSRs signed
// by the controller over the node's subject.
func (a *Agent) wire(nc *nats.Conn, root *x509.Certificate) *certs {
	certs := newCerts(certsConfig{dir: filepath.Join(a.cfg.Dir, CertmagicDir), mesh: a.state.Mesh, root: root, rootPEM: a.state.CARoot,
		renewCheck: a.cfg.CertRenewCheck, sign: busSigner(nc, a.state.Node), held: a.Intermediates}, a.log)
	a.engine = NewEngine(a.services(nc, certs))
	a.engine.Panicked = a.panicked
	return certs
}

// inbox is what the bus delivers to the host, by what it is.
type inbox struct {
	// deliveries are the node's declarations and the roster messages.
	deliveries chan *nats.Msg
	// previews ask what an apply would do; acks answer reports.
	previews, acks chan *nats.Msg
	subs           []*nats.Subscription
}

// subscribe subscribes the host to what the bus delivers it. What it
// subscribed is in the inbox even when a later subscription failed.
func (a *Agent) subscribe(nc *nats.Conn) (*inbox, error) {
	in := &inbox{deliveries: make(chan *nats.Msg, 64), previews: make(chan *nats.Msg, 16), acks: make(chan *nats.Msg, 16)}
	sub := func(subject string, ch chan *nats.Msg, what string) error {
		s, err := nc.ChanSubscribe(subject, ch)
		if err != nil {
			return fmt.Errorf("subscribe to %s: %w", what, err)
		}
		in.subs = append(in.subs, s)
		return nil
	}
	// The node's declarations and the roster messages the stream
	// republishes, into one channel: handled in the order the bus sends
	// them.
	for _, subject := range []string{spec.DeclarationDelivery(a.state.Node), spec.RosterDelivery} {
		if err := sub(subject, in.deliveries, subject); err != nil {
			return in, err
		}
	}
	if err := sub(spec.PreviewSubject(a.state.Node), in.previews, "the preview subject"); err != nil {
		return in, err
	}
	if err := sub(spec.ReportAckSubject(a.state.Node), in.acks, "the reports' answers"); err != nil {
		return in, err
	}
	return in, nil
}

// unsubscribe ends the inbox's subscriptions, the last first.
func (in *inbox) unsubscribe() {
	for i := len(in.subs) - 1; i >= 0; i-- {
		in.subs[i].Unsubscribe()
	}
}

// loop has the host heard and ready, then reports, applies and answers
// what the bus delivers until ctx ends, the node is removed (ErrRemoved),
// or a new version is delivered for a launcher to start (ErrStandAside).
// renewed hears of the certificates renewed.
func (a *Agent) loop(ctx context.Context, nc *nats.Conn, version string, removed, renewed <-chan struct{}, in *inbox) error {
	facts := time.NewTicker(a.cfg.FactsEvery)
	defer facts.Stop()
	reconcile := time.NewTicker(a.cfg.ReconcileEvery)
	defer reconcile.Stop()
	var overlayTicks <-chan time.Time
	if a.overlay != nil {
		t := time.NewTicker(overlayTick)
		defer t.Stop()
		overlayTicks = t.C
	}
	a.sendFacts(ctx, nc)
	// The engine is watched apart, so that one that hangs delays no
	// heartbeat or delivery; when it starts or stops answering, the facts
	// are sent again at once.
	engineFlips := make(chan struct{}, 1)
	go a.safely("engine watch", func() { a.watch.watch(ctx, engineFlips) })
	if up, err := a.start(ctx, nc, version, removed); !up {
		return err
	}
	// A container that stops is started again and reported within
	// seconds, not at the next reconcile.
	eventPasses := a.watch.followContainers(ctx)
	// What was kept is held again at start: an apply cut short converges.
	a.safely("reconcile", func() { a.reconcile(ctx, nc) })
	if err := a.standAside(nc, version); err != nil {
		return err
	}

	for {
		select {
		case <-ctx.Done():
			return nil
		case <-removed:
			return ErrRemoved
		case <-facts.C:
			a.sendFacts(ctx, nc)
		case <-engineFlips:
			a.sendFacts(ctx, nc)
			if a.watch.up.Load() {
				// The engine answers again: what failed for want of it
				// is applied again at once.
				a.safely("heal", func() { a.healDue(ctx, nc, true) })
			}
		case <-a.factsNow:
			a.sendFacts(ctx, nc)
		case <-reconcile.C:
			a.safely("reconcile", func() { a.reconcile(ctx, nc) })
		case <-overlayTicks:
			a.safely("overlay", func() { a.overlay.tick(ctx, nc) })
			continue // a tick applies nothing
		case <-eventPasses:
			a.safely("reconcile", func() { a.reconcile(ctx, nc) })
		case <-renewed:
			// A renewal is copied where it is declared by a pass, which
			// writes only what differs: the certificates' directories.
			a.safely("reconcile", func() { a.reconcile(ctx, nc) })
		case <-a.catchUp:
			a.beatIfApplied("catch up", func() { a.catchUpNow(ctx, nc) })
		case <-a.retry.C:
			a.beatIfApplied("retry", func() { a.retryNow(ctx, nc) })
		case m := <-in.previews:
			a.safely("preview", func() { a.handlePreview(ctx, nc, m) })
			continue // a preview applies nothing
		case m := <-in.acks:
			a.reports.acked(m)
			continue
		case m := <-in.deliveries:
			a.safely("delivery", func() { a.handleBatch(ctx, nc, []*nats.Msg{m}) })
			a.nudgeHeartbeat()
		}
		// After an apply, its report sent: a new version may be delivered.
		if err := a.standAside(nc, version); err != nil {
			return err
		}
	}
}

// start has the host heard: it is ready once a heartbeat has reached the
// bus, retried until then at the reconnect pace rather than the
// heartbeat's; the heartbeats then go on apart, the kept names are served
// and the host catches up. False when the run ends first, with what Run
// returns.
func (a *Agent) start(ctx context.Context, nc *nats.Conn, version string, removed <-chan struct{}) (bool, error) {
	for {
		err := a.sendHeartbeat(nc, version)
		if err == nil {
			err = nc.FlushTimeout(5 * time.Second)
		}
		if err == nil {
			break
		}
		a.log.Debug("first heartbeat not through yet", "err", err)
		select {
		case <-ctx.Done():
			return false, nil
		case <-removed:
			return false, ErrRemoved
		case <-time.After(time.Second):
		}
	}
	go a.safely("heartbeats", func() { a.heartbeats(ctx, nc, version, a.beatNow) })
	if a.heldErr != nil {
		a.log.Error("nothing is applied or served from the kept declaration until another is received", "err", a.heldErr)
	}
	if a.rosterErr != nil {
		a.log.Error("no names are served from the kept roster until another is received", "err", a.rosterErr)
	}
	a.safely("names", a.serveNames)
	// What was published while this host was away is not delivered
	// again: it asks for the roster in force and its last declaration,
	// naming its own.
	nudge(a.catchUp)
	close(a.ready)
	a.log.Info("host ready", "node", a.state.Node, "bus", nc.ConnectedUrl(), "version", version[:12])
	return true, nil
}

// sendFacts gathers the machine's facts and sends them.
func (a *Agent) sendFacts(ctx context.Context, nc *nats.Conn) {
	defer a.catch("facts")
	f := GatherFacts()
	f.Node, f.Time = a.state.Node, time.Now().UTC()
	a.watch.facts(ctx, &f)
	a.engine.kindFacts(a.held.resources(), &f)
	if chain := a.Intermediates(); len(chain) > 0 {
		f.Intermediate = ca.SerialOf(chain[0])
	}
	if err := publish(nc, spec.NodeSubject(a.state.Node, spec.KindFacts), f); err != nil {
		a.log.Warn("facts not sent", "err", err)
	}
}

// services are what the host offers the kinds it holds, over nc, with
// certs its certificate manager.
func (a *Agent) services(nc *nats.Conn, certs *certs) Services {
	s := Services{
		Root:     a.cfg.Root,
		Blobs:    busBlobs{nc: nc, node: a.state.Node},
		Docker:   a.cfg.Docker,
		Node:     a.state.Node,
		Address:  a.state.Address,
		Subnet:   a.cfg.Subnet,
		Names:    a.cfg.Names,
		CARoot:   a.state.CARoot,
		Versions: filepath.Join(a.cfg.Dir, spec.VersionsDir),
		SealKey:  a.sealKey,
		Runtime:  filepath.Join(a.cfg.Dir, RuntimeDir),
		Overlay:  a.overlay.address,
		certs:    certs,
	}
	a.kinds.provide(&s)
	return s
}

// loadSealKey is the sealing key kept in dir, nil when there is none; a
// key file that is there and not sound is an error.
func loadSealKey(dir string) (*seal.NodeKey, error) {
	k, err := seal.LoadNodeKey(filepath.Join(dir, seal.NodeKeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the host's sealing key: %w", err)
	}
	return k, nil
}

// beatIfApplied runs f (safely, as what) and has a heartbeat sent at once
// when it applied a declaration: a catch-up or a retry that changed
// nothing says nothing.
func (a *Agent) beatIfApplied(what string, f func()) {
	applied := a.appliedSeq.Load()
	a.safely(what, f)
	if a.appliedSeq.Load() != applied {
		a.nudgeHeartbeat()
	}
}

func publish(nc *nats.Conn, subject string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", subject, err)
	}
	return nc.Publish(subject, body)
}
