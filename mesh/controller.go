package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/web"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
)

// Part is one part of the process whose readiness /healthz reports.
type Part struct {
	Name  string
	Ready <-chan struct{}
}

// Config is what the controller needs.
type Config struct {
	// HTTPListen is host:port of /healthz, /metrics and /roots.pem; port 0
	// takes a free port.
	HTTPListen string
	// Keys are the controller's own bus users, composed into the bus's
	// users (Users).
	Keys Keys
	// Parts are the other parts of the process; /healthz is ready only when
	// every one of them and the controller are.
	Parts []Part
	// BusURLs are where other machines reach the bus; tokens carry them.
	BusURLs []string
	// SignKey signs declarations; hosts learn its public half at enrolment.
	SignKey ed25519.PrivateKey
	// SealKey seals the secret settings in the store and opens them to
	// compose (LoadSealKey).
	SealKey *seal.RestKey
	// Node is the node whose host runs in this process, if any: it cannot be
	// removed, since its host would lose the bus for good.
	Node string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// RollTicks are when the roll loop looks again at a running roll;
	// nil means a ticker's, every rollTick. A test sends its own.
	RollTicks <-chan time.Time
	// CertLifetime is how long a leaf signed for a node's CSR is valid;
	// zero means DefaultCertLifetime.
	CertLifetime time.Duration
	// Version is the hex SHA-256 of the running binary: /metrics carries it
	// as mesh_build_info's label. Empty when not known (a test's).
	Version string
	// MaxNodes is how many nodes the mesh admits (joined, being removed,
	// or holding an unused token); zero means spec.MaxNodes.
	MaxNodes int
	// MetricsTokenFile keeps the SHA-256 of /metrics's bearer token
	// (mesh ui token --metrics), which a listener off loopback asks for;
	// empty: kept in memory only.
	MetricsTokenFile string
	// CrashFile is where a test names the point of a push at which the
	// controller dies as by kill -9 (crash.go); empty: it never does.
	CrashFile string
	// Panics counts the panics recovered in the process (mesh_panics_total):
	// the controller's own and, when main shares it, its host's. Nil: the
	// controller counts its own.
	Panics *atomic.Uint64
	// ResolverLatency is the histogram the process's resolver observes
	// (NewResolverLatency), shown on /metrics; nil when the process runs
	// no resolver.
	ResolverLatency prometheus.Histogram
	// Joins admits controllers into the controllers' cluster; nil for a
	// controller run without --cluster, which refuses their tokens.
	Joins ControllerJoins
	// Replicas is how many servers keep the declaration stream and the
	// edges' bucket; zero is one.
	Replicas int
	// Controllers are the bus URLs of every controller of a cluster of
	// them, which the roster carries to the hosts (spec.Roster's
	// Controllers); none for a controller alone: the hosts keep the URLs
	// they enrolled with.
	Controllers []string
}

// Deps are the parts the controller uses.
type Deps struct {
	DB  Store
	CA  *ca.Authority
	Bus *broker.Server
}

// base is what every concern of the controller reads: the store, the
// clock, the log, and the guard its loops and handlers run under.
type base struct {
	db    Store
	now   func() time.Time
	log   *slog.Logger
	guard guard
}

// Controller runs the operator API and listens to the nodes.
type Controller struct {
	cfg  Config
	log  *slog.Logger
	deps Deps
	// sealed is deps.DB: the store, its secret settings sealed.
	sealed *sealedStore
	ready  chan struct{}
	guard  guard

	mu       sync.Mutex
	httpAddr string

	enrolment *enrolment

	nc      *nats.Conn // full power: declarations, previews, JetStream; serves nothing
	js      jetstream.JetStream
	serving *nats.Conn // serves requests and progress; may publish only to inboxes

	// sender numbers, signs, records and publishes declarations (send.go).
	sender  *sender
	locks   nodeLocks // per node: sequences are taken under them
	rosters *rosters
	// refused are the nodes whose hosts speak another protocol.
	refused refusedHosts
	// stream is the declaration stream's handle (declarations).
	streamMu sync.Mutex
	stream   jetstream.Stream

	watches *watches   // pushes waiting for reports
	claims  *claimBook // per node: an applied sequence above the last sent

	auditor *auditor

	blobs   *blobs
	modules *catalogue

	composer *composer
	certs    *certs

	verbs map[string]row // the operator API, by verb (verbs.go)

	metrics metrics
	timings *timings
	// registry holds every series /metrics shows (metrics.go).
	registry *prometheus.Registry
	// beats are the heartbeats not yet written, and each node's rate.
	beats *beats
	// reports are the reports not yet written (reports.go).
	reports  *reportLine
	beatLine *beatLine
	numbers  *numberer
	// roller is the roll loop's (roll.go).
	roller *roller
	// overlays is the overlay's verbs and view, and sends the roster when its membership changes
	// (overlay.go).
	overlays *overlays
	// edges are the edges' reports of their public names (edgestate.go).
	edges *edgeStates
	// dropLog lets one line a requester through every 10 s for dropped
	// requests; mesh_replies_refused_total counts them all.
	dropLog logGate
	// pages are the status pages on the HTTP listener; ui is who may
	// read them; changes tells them something reached the controller,
	// recorded counts the facts and report batches recorded (view.go,
	// ui.go).
	pages    *web.Pages
	ui       *uiAccess
	changes  pulse
	recorded atomic.Uint64
}

// New checks cfg and starts nothing.
func New(cfg Config, log *slog.Logger, deps Deps) (*Controller, error) {
	if deps.DB == nil || deps.CA == nil || deps.Bus == nil {
		return nil, errors.New("controller: store, CA and bus are all required")
	}
	if cfg.Keys.Full == nil || cfg.Keys.Serve == nil {
		return nil, errors.New("controller: no bus keys")
	}
	if _, _, err := net.SplitHostPort(cfg.HTTPListen); err != nil {
		return nil, fmt.Errorf("http address %q: %w (want host:port, e.g. 127.0.0.1:8480)", cfg.HTTPListen, err)
	}
	if len(cfg.SignKey) != ed25519.PrivateKeySize {
		return nil, errors.New("controller: no signing key")
	}
	if cfg.SealKey == nil {
		return nil, errors.New("controller: no at-rest key")
	}
	if len(cfg.BusURLs) == 0 {
		return nil, errors.New("controller: no bus URL for tokens to carry")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Panics == nil {
		cfg.Panics = new(atomic.Uint64)
	}
	if cfg.CertLifetime == 0 {
		cfg.CertLifetime = DefaultCertLifetime
	}
	if cfg.CertLifetime < MinCertLifetime {
		return nil, fmt.Errorf("certificate lifetime %s is shorter than %s: a leaf must outlive the time it takes to renew it", cfg.CertLifetime, MinCertLifetime)
	}
	sealed := sealing(deps.DB, cfg.SealKey)
	deps.DB = sealed
	c := &Controller{cfg: cfg, sealed: sealed, log: log, deps: deps, ready: make(chan struct{}), dropLog: logGate{every: 10 * time.Second}, beats: newBeats(),
		changes: make(pulse, 1)}
	gate, err := web.NewGate(onLoopback(cfg.HTTPListen), cfg.MetricsTokenFile, cfg.Now)
	if err != nil {
		return nil, err
	}
	c.ui = &uiAccess{gate: gate, addr: c.HTTPAddr}
	if c.pages, err = web.New(View{c}, log.With("component", "pages"), cfg.Now); err != nil {
		return nil, err
	}
	c.guard = guard{panics: cfg.Panics, log: log}
	c.timings = newTimings()
	b := base{db: deps.DB, now: cfg.Now, log: log, guard: c.guard}
	c.composer = &composer{db: deps.DB, ca: deps.CA, controllers: controllersOf(cfg.Controllers, log), sealer: &sealer{db: deps.DB, key: cfg.SealKey,
		edges: &edgeKeyring{db: deps.DB, key: cfg.SealKey, now: cfg.Now}}}
	c.rosters = &rosters{base: b, signKey: cfg.SignKey, metrics: &c.metrics, js: func() jetstream.JetStream { return c.js }}
	c.certs = &certs{base: b, ca: deps.CA, key: cfg.SealKey, composer: c.composer}
	c.auditor = &auditor{base: b, kick: make(chan struct{}, 1)}
	c.watches = &watches{now: cfg.Now, log: log, byNode: map[string][]*watcher{},
		publish: func(subject string, body []byte) error { return c.serving.Publish(subject, body) }}
	c.claims = &claimBook{db: deps.DB, log: log, byNode: map[string]claim{}}
	c.numbers = &numberer{db: deps.DB, now: cfg.Now, claims: c.claims}
	c.sender = &sender{base: b, signKey: cfg.SignKey, locks: &c.locks, claims: c.claims, numbers: c.numbers, metrics: &c.metrics, crashFile: cfg.CrashFile,
		nc: func() *nats.Conn { return c.nc }, js: func() jetstream.JetStream { return c.js }}
	c.blobs = &blobs{base: b, metrics: &c.metrics, collectKick: make(chan struct{}, 1)}
	c.roller = newRoller(b, cfg.Node, cfg.RollTicks)
	c.roller.gather, c.roller.rosterOnce, c.roller.contentNow, c.roller.send = c.composer.gather, c.rosters.rosterOnce, c.rosters.contentNow, c.sender.send
	c.overlays = &overlays{base: b, delay: membershipDelay, kick: make(chan struct{}, 1), send: c.sendNames}
	c.edges = newEdgeStates(b, &c.refused)
	c.enrolment = &enrolment{base: b, keys: cfg.Keys, busURLs: cfg.BusURLs, node: cfg.Node, signKey: cfg.SignKey, maxNodes: c.maxNodes(),
		joins: cfg.Joins, bus: deps.Bus, ca: deps.CA, metrics: &c.metrics, locks: &c.locks, beats: c.beats,
		purge:     func(ctx context.Context, node string) error { return purgeDeclarations(ctx, c.js, node) },
		sendNames: c.sendNames, membershipChanged: c.overlays.changed}
	c.modules = &catalogue{base: b, composeOne: c.composer.composeOne, nudgeCollect: c.blobs.nudgeCollect, usersChanged: c.enrolment.syncUsers}
	c.reports = &reportLine{base: b, queue: make(chan queuedReport, reportQueue), claims: c.claims, watches: c.watches, respond: c.respond,
		unsent: &c.metrics.reportsUnsent, applied: c.timings.apply, dropLog: &c.dropLog, changed: c.record}
	c.beatLine = &beatLine{base: b, beats: c.beats, claims: c.claims, resend: c.sender.resendIfExpired, redeliver: c.sender.redeliver, rosterSeq: c.deps.DB.LastRosterSeq, redeliverRoster: c.rosters.redeliver, changed: c.changes.kick}
	c.verbs = verbTable(c.verbRows())
	c.auditor.verbs = c.verbs
	reg, err := c.newRegistry()
	if err != nil {
		return nil, err
	}
	c.registry = reg
	return c, nil
}

// Ready is closed once the controller answers the API and HTTP.
func (c *Controller) Ready() <-chan struct{} { return c.ready }

// HTTPAddr is the address the HTTP listener bound; empty before Ready.
func (c *Controller) HTTPAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.httpAddr
}

// Run serves until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	select {
	case <-c.deps.Bus.Ready():
	case <-ctx.Done():
		return nil
	}
	c.enrolment.mu.Lock()
	c.enrolment.users = byKey(c.deps.Bus.Users())
	c.enrolment.mu.Unlock()
	// The intermediate that signs is the store's: another controller may
	// have issued it while this one followed.
	if err := c.certs.adopt(ctx); err != nil {
		return err
	}
	l, err := c.listen()
	if err != nil {
		return err
	}
	nc, serving, err := c.start(ctx)
	if err != nil {
		l.Close()
		return err
	}
	defer nc.Close()
	defer serving.Close()

	// The loops end before the connections they publish on close: a send
	// that waits for the stream's acknowledgements would otherwise wait
	// them out on a closed connection (nats.go fails no pending ack).
	loopCtx, stopLoops := context.WithCancel(ctx)
	waitLoops := goAll(loopCtx, c.auditor.drainAudit, c.beatLine.writeBeats, c.reports.writeReports, c.roller.rollLoop, c.blobs.collectLoop, c.overlays.sendLoop, c.pages.Run, c.controllersLoop)
	defer func() { stopLoops(); waitLoops() }()

	srv := &http.Server{Handler: c.guardHTTP(c.httpHandler()), ReadHeaderTimeout: 10 * time.Second}
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Serve(l) }()
	c.mu.Lock()
	c.httpAddr = l.Addr().String()
	c.mu.Unlock()
	close(c.ready)
	c.log.Info("controller ready", "http", l.Addr().String())

	if err := c.sweepUntil(ctx, httpDone); err != nil {
		return err
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	// The handlers finish first, then the loops, and only then does the
	// connection they publish on drain.
	drained := make(chan struct{})
	serving.SetClosedHandler(func(*nats.Conn) { close(drained) })
	if serving.Drain() == nil {
		<-drained
	}
	stopLoops()
	waitLoops()
	nc.Drain()
	return nil
}

// listen binds the HTTP listener: off loopback it serves TLS with a mesh
// certificate, and its pages need a session (ui.go).
func (c *Controller) listen() (net.Listener, error) {
	l, err := net.Listen("tcp", c.cfg.HTTPListen)
	if err != nil {
		return nil, fmt.Errorf("bind http address %s: %w", c.cfg.HTTPListen, err)
	}
	if c.ui.gate.Open() {
		return l, nil
	}
	tc, err := listenerTLS(c.cfg.HTTPListen, c.cfg.Node, c.deps.CA)
	if err != nil {
		l.Close()
		return nil, err
	}
	return tls.NewListener(l, tc), nil
}

// start opens the controller's two bus connections, readies the
// declaration stream, seals the store's plain secret settings and
// subscribes to every subject the controller answers. On an error it
// leaves no connection open.
func (c *Controller) start(ctx context.Context) (nc, serving *nats.Conn, err error) {
	if nc, err = c.connect(c.cfg.Keys.Full, "controller"); err != nil {
		return nil, nil, err
	}
	c.nc = nc
	if serving, err = c.connect(c.cfg.Keys.Serve, "controller serving"); err != nil {
		nc.Close()
		return nil, nil, err
	}
	c.serving = serving
	defer func() {
		if err != nil {
			serving.Close()
			nc.Close()
		}
	}()
	if c.js, err = jetstream.New(nc); err != nil {
		return nil, nil, fmt.Errorf("controller JetStream: %w", err)
	}
	if err := c.ensureDelivery(ctx); err != nil {
		return nil, nil, err
	}
	// A store written before secret settings were sealed is sealed
	// before anything is served: no plain secret stays in it.
	if n, err := c.sealed.sealPlain(ctx, nil); err != nil {
		return nil, nil, fmt.Errorf("seal the store's secret settings: %w", err)
	} else if n > 0 {
		c.log.Info("secret settings sealed", "assignments", n)
	}
	if err := c.subscribe(ctx, serving); err != nil {
		return nil, nil, err
	}
	return nc, serving, nil
}

// sweepUntil sweeps every 15 s until ctx ends, so that expired tokens'
// enrolment users leave the bus within a sweep; it returns the HTTP
// listener's error if that stops first.
func (c *Controller) sweepUntil(ctx context.Context, httpDone <-chan error) error {
	sweep := time.NewTicker(15 * time.Second)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-httpDone:
			return fmt.Errorf("http listener: %w", err)
		case <-sweep.C:
			c.sweep(ctx)
		}
	}
}

// subscribe has serving take every subject the controller answers.
func (c *Controller) subscribe(ctx context.Context, serving *nats.Conn) error {
	// Each handler is told who sent its message, as the subject places
	// them, and answers only under that requester's own inbox.
	subs := []struct {
		subject, queue string
		who            func(*nats.Msg) requester
		handle         func(*nats.Msg, requester)
	}{
		{spec.APIPrefix + ">", "api", byOperatorSubject, func(m *nats.Msg, r requester) { c.serveAPI(ctx, m, r) }},
		{spec.NodeSubject("*", spec.KindHeartbeat), "", byNodeSubject, func(m *nats.Msg, _ requester) { c.onHeartbeat(ctx, m) }},
		{spec.NodeSubject("*", spec.KindFacts), "", byNodeSubject, func(m *nats.Msg, _ requester) { c.onFacts(ctx, m) }},
		{spec.NodeSubject("*", spec.KindOverlay), "", byNodeSubject, func(m *nats.Msg, _ requester) { c.onOverlay(ctx, m) }},
		{spec.NodeSubject("*", spec.KindEdgeState), "", byNodeSubject, func(m *nats.Msg, _ requester) { c.edges.on(ctx, m) }},
		{spec.EnrolSubject, "enrol", c.enrolRequester(ctx), func(m *nats.Msg, r requester) { c.onEnrol(ctx, m, r) }},
		{spec.NodeSubject("*", spec.KindReport), "", byNodeSubject, func(m *nats.Msg, r requester) { c.onReport(ctx, m, r) }},
		{spec.NodeSubject("*", spec.KindBlob), "blob", byNodeSubject, func(m *nats.Msg, r requester) { c.onBlob(ctx, m, r) }},
		{spec.NodeSubject("*", spec.KindCSR), "csr", byNodeSubject, func(m *nats.Msg, r requester) { c.onCSR(ctx, m, r) }},
		{spec.NodeSubject("*", spec.KindRoster), "roster", byNodeSubject, func(m *nats.Msg, r requester) { c.onRoster(ctx, m, r) }},
		{spec.NodeSubject("*", spec.KindDeclaration), "declaration", byNodeSubject, func(m *nats.Msg, r requester) { c.onDeclaration(ctx, m, r) }},
	}
	for _, s := range subs {
		if _, err := serving.QueueSubscribe(s.subject, s.queue, c.guardMsg(s.subject, s.who, s.handle)); err != nil {
			return fmt.Errorf("subscribe to %s: %w", s.subject, err)
		}
	}
	if err := serving.Flush(); err != nil {
		return fmt.Errorf("subscribe controller: %w", err)
	}
	return nil
}

// goAll runs each loop until ctx ends, and returns what waits for them all.
func goAll(ctx context.Context, loops ...func(context.Context)) (wait func()) {
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Go(func() { loop(ctx) })
	}
	return wg.Wait
}

// inProcessTimeout bounds the handshake of the controller's own
// connections. The bus may be taking thousands of hosts reconnecting at
// once, each with a TLS handshake, when the controller starts again:
// nats.go's 2 s default would time its own connection out, and the
// controller would exit.
const inProcessTimeout = time.Minute

// connect opens an in-process connection to the bus as key's user.
func (c *Controller) connect(key nkeys.KeyPair, name string) (*nats.Conn, error) {
	pub, err := key.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("%s bus key: %w", name, err)
	}
	nc, err := nats.Connect("", nats.InProcessServer(c.deps.Bus.NATS()), nats.Nkey(pub, key.Sign), nats.Name(name),
		nats.Timeout(inProcessTimeout))
	if err != nil {
		return nil, fmt.Errorf("connect %s to the bus: %w", name, err)
	}
	return nc, nil
}

// sweep withdraws expired tokens' enrolment users and forgets pushes that
// waited past their expiry.
func (c *Controller) sweep(ctx context.Context) {
	defer c.guard.catch("sweep", nil)
	if err := c.enrolment.syncUsers(ctx); err != nil {
		c.log.Error("bus users not refreshed", "err", err)
	}
	c.watches.dropExpiredWatchers()
}

func (c *Controller) onHeartbeat(ctx context.Context, m *nats.Msg) {
	c.metrics.heartbeats.Add(1)
	node, _, _ := spec.NodeFromSubject(m.Subject)
	var hb spec.Heartbeat
	if err := spec.Decode(m.Data, &hb); err != nil {
		report, ok := versionReport(m.Data)
		if !ok {
			c.log.Warn("heartbeat refused", "node", node, "err", err)
			return
		}
		hb = report
	}
	if hb.Node != node {
		c.log.Warn("heartbeat refused: it names another node than its subject", "node", node, "names", hb.Node)
		return
	}
	// Kept as the node's latest and written with the next batch
	// (heartbeats.go): one node's rate delays no other's.
	hb = keptHeartbeat(hb)
	hb.Fallbacks = c.checkedFallbacks(node, hb.Fallbacks)
	if c.beats.add(hb, c.cfg.Now()) {
		c.metrics.heartbeatsExcess.Add(1)
	}
	c.changes.kick()
	if c.refused.note(node, hb.Protocol) {
		c.log.Warn("host refused", "node", node, "reason", spec.ProtocolRefusal(hb.Protocol, thisController))
	}
}

func (c *Controller) onFacts(ctx context.Context, m *nats.Msg) {
	node, _, _ := spec.NodeFromSubject(m.Subject)
	var f spec.Facts
	if err := spec.Decode(m.Data, &f); err != nil {
		c.log.Warn("facts refused", "node", node, "err", err)
		return
	}
	if p, refused := c.refused.of(node); refused {
		c.log.Debug("facts refused", "node", node, "reason", spec.ProtocolRefusal(p, thisController))
		return
	}
	if f.Node != node {
		c.log.Warn("facts refused: they name another node than their subject", "node", node, "names", f.Node)
		return
	}
	if err := f.Check(); err != nil {
		c.log.Warn("facts refused: no machine has them", "node", node, "err", err)
		return
	}
	if err := c.deps.DB.RecordFacts(ctx, keptFacts(f), c.cfg.Now()); err != nil {
		c.log.Error("facts not recorded", "node", node, "err", err)
		return
	}
	c.record()
	c.log.Debug("facts recorded", "node", node)
}

// ensureDelivery creates the declaration stream, publishes the roster in
// force and the last declaration of every node but one being removed when
// the stream does not hold them.
func (c *Controller) ensureDelivery(ctx context.Context) error {
	if err := ensureStream(ctx, c.js, c.maxNodes(), c.cfg.Replicas); err != nil {
		return err
	}
	if err := ensureEdgeBucket(ctx, c.js, c.cfg.Replicas); err != nil {
		return err
	}
	// The roster before the declarations that may name it.
	if err := c.rosters.publishRecordedRoster(ctx); err != nil {
		return err
	}
	nodes, err := c.deps.DB.Nodes(ctx)
	if err != nil {
		return err
	}
	c.refused.load(nodes)
	for _, n := range nodes {
		if !n.Removing.IsZero() {
			continue
		}
		if err := c.sender.publishRecorded(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// metrics are the controller's counters, shown on /metrics.
type metrics struct {
	heartbeats atomic.Uint64
	// heartbeatsExcess counts heartbeats beyond floodBeats a window from
	// one node.
	heartbeatsExcess atomic.Uint64
	// fallbacksRefused counts launcher fall-backs heartbeats carried
	// that were not shown: a digest not of a release's form, a time zero
	// or ahead of the controller's clock.
	fallbacksRefused atomic.Uint64
	// reportsUnsent counts reports of a declaration never sent to their
	// node, dropped.
	reportsUnsent atomic.Uint64
	apiCalls      atomic.Uint64
	apiErrors     atomic.Uint64
	enrols        atomic.Uint64
	// repliesRefused counts requests dropped because their reply subject
	// was not under the requester's own inbox.
	repliesRefused atomic.Uint64
	reports        atomic.Uint64
	// certsIssued and csrRefused count nodes' CSRs signed and refused.
	certsIssued atomic.Uint64
	csrRefused  atomic.Uint64
	// blobsCollected and blobBytesCollected count the unused blobs
	// deleted, and their bytes.
	blobsCollected     atomic.Uint64
	blobBytesCollected atomic.Uint64
	// declarationsSent and declarationBytes count the declarations
	// published, and their bytes (a preview is not one).
	declarationsSent atomic.Uint64
	declarationBytes atomic.Uint64
	// redelivered counts declarations handed again to a node heard not
	// to apply them (redeliver).
	redelivered atomic.Uint64
	// rostersSent and rosterBytes count the roster messages published,
	// and their bytes.
	rostersSent atomic.Uint64
	rosterBytes atomic.Uint64
	// rostersRedelivered counts the roster in force announced again to
	// hosts heard not to hold it (rosters.redeliver).
	rostersRedelivered atomic.Uint64
}

// countSent counts a declaration of size bytes published.
func (m *metrics) countSent(size int) {
	m.declarationsSent.Add(1)
	m.declarationBytes.Add(uint64(size))
}

// countRoster counts a roster message of size bytes published.
func (m *metrics) countRoster(size int) {
	m.rostersSent.Add(1)
	m.rosterBytes.Add(uint64(size))
}

// maxNodes is how many nodes the mesh admits.
func (c *Controller) maxNodes() int {
	if c.cfg.MaxNodes > 0 {
		return c.cfg.MaxNodes
	}
	return spec.MaxNodes
}
