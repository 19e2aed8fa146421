package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/lease"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// DefaultLeaseTTL is how long the controllers' leader lease outlives its
// last renewal when MeshConfig names no LeaseTTL: a leader gone is
// replaced within it.
const DefaultLeaseTTL = 6 * time.Second

// leadPoll is how often a controller looks at its lease's standing, which
// also lapses with time alone (lease.State.Leading).
const leadPoll = 100 * time.Millisecond

// usersEvery is how often a follower brings its bus's users up to its
// view; leadRetry is how long a leader whose controller failed waits
// before it starts another.
const (
	usersEvery = time.Second
	leadRetry  = 2 * time.Second
)

// runner is a controller as leadership runs it: once.
type runner interface {
	Run(context.Context) error
	Ready() <-chan struct{}
	HTTPAddr() string
}

// ctlMaker builds a controller listening on httpListen: a new one each
// time this machine leads, since a controller runs once.
type ctlMaker func(httpListen string) (runner, error)

// controllerPart is the part that runs the controller: alone, the
// controller cfg and deps make, as it always ran; with lead, a
// controller made afresh each time this machine leads, run while it
// leads. It returns the part and what says the HTTP address it bound.
func controllerPart(cfg mesh.Config, log *slog.Logger, deps mesh.Deps, lead *leadership, held io.Closer) (part, func() string, error) {
	build := func(httpListen string) (runner, error) {
		c := cfg
		c.HTTPListen = httpListen
		return mesh.New(c, log, deps)
	}
	if lead == nil {
		ctl, err := mesh.New(cfg, log, deps)
		if err != nil {
			return part{}, nil, err
		}
		return part{"controller", ctl.Run, ctl.Ready(), held}, ctl.HTTPAddr, nil
	}
	// The first controller is made here, and dropped: its config is
	// checked before anything starts, as a controller alone's is.
	if _, err := build(cfg.HTTPListen); err != nil {
		return part{}, nil, err
	}
	lead.newCtl, lead.listen = build, cfg.HTTPListen
	return part{"controller", lead.run, lead.ready, held}, lead.httpAddr, nil
}

// leadership is a controller of a cluster of controllers: it campaigns
// for the lease in the store's log bucket, runs the controller only while
// it leads, and otherwise holds the HTTP address, saying it follows and
// who leads. The log's writes are fenced by its lease (fence).
type leadership struct {
	log     *slog.Logger
	name    string
	ttl     time.Duration
	auth    *ca.Authority
	connect func(context.Context) (jetstream.JetStream, error)
	truth   *journal.Journal
	// follows is set for a controller that joined: its journal never
	// begins a log, so it campaigns only once its view is ready. Were
	// it to lead before, it would wait for a log only the leader may
	// begin.
	follows bool
	peers   int // how many controllers the cluster has
	// syncUsers puts the bus's users as the view has them in force: the
	// leader's controller does it for its own server, and a follower for
	// its own, or a node that joined through the leader would be refused
	// by a follower's server.
	syncUsers func(context.Context) error
	// newCtl and listen are set by controllerPart.
	newCtl ctlMaker
	listen string

	campaign atomic.Pointer[lease.Campaign]
	// serving holds while this controller's mesh.Controller serves: a
	// leader says it leads only then, so an operator told so is served.
	serving atomic.Bool
	started chan struct{} // closed once campaign is set
	ready   chan struct{} // closed once the HTTP address is served
	once    sync.Once

	mu   sync.Mutex
	addr string
	js   jetstream.JetStream // the campaign's, set before started closes
	kv   jetstream.KeyValue
}

// newLeadership is the leadership of the controller named server (its
// cluster server name), nil for a controller alone: no cluster, or one of
// a single peer.
func newLeadership(st *ClusterState, ttl time.Duration, log *slog.Logger, auth *ca.Authority,
	connect func(context.Context) (jetstream.JetStream, error)) *leadership {
	if st == nil || len(st.Peers) < 2 {
		return nil
	}
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	return &leadership{log: log, name: st.Server, ttl: ttl, auth: auth, connect: connect, follows: st.follows(), peers: len(st.Peers),
		started: make(chan struct{}), ready: make(chan struct{})}
}

// fenceOf is the journal's Fence for lead: nil for a controller alone.
func fenceOf(lead *leadership) func() (uint64, bool) {
	if lead == nil {
		return nil
	}
	return lead.fence
}

// fence is the lease as this controller holds it: its revision, and
// whether it leads.
func (l *leadership) fence() (uint64, bool) {
	c := l.campaign.Load()
	if c == nil {
		return 0, false
	}
	st, _ := c.Leader()
	return st.Revision, st.Leading
}

// campaignPart is the part that campaigns for the lease, from before the
// journal starts (which begins or restarts the log only while leading)
// until after the controller stopped; it also answers, for every
// controller, what it is (spec.ControllerRoleSubject).
func (l *leadership) campaignPart() part {
	return part{"lease", l.runCampaign, l.started, nil}
}

func (l *leadership) runCampaign(ctx context.Context) error {
	js, err := l.connect(ctx)
	if err != nil {
		return err
	}
	defer js.Conn().Close()
	c, err := lease.New(lease.Config{Bucket: journal.DefaultBucket, Key: journal.LeaseKey, Name: l.name, TTL: l.ttl},
		l.log, lease.Deps{JS: js})
	if err != nil {
		return err
	}
	sub, err := js.Conn().Subscribe(spec.ControllerRoleSubject, func(m *nats.Msg) {
		st, _ := c.Leader()
		role := spec.ControllerRole{Server: l.name, Role: st.Role.String(), Leader: l.leaderName(ctx, js), Peers: l.peers}
		if st.Role == lease.Leader && (!st.Leading || !l.serving.Load()) {
			role.Role = lease.Candidate.String()
		}
		m.Respond(spec.EncodeReply(role, nil))
	})
	if err != nil {
		return fmt.Errorf("answer on %s: %w", spec.ControllerRoleSubject, err)
	}
	defer sub.Unsubscribe()
	l.mu.Lock()
	l.js = js
	l.mu.Unlock()
	l.campaign.Store(c)
	close(l.started)
	if l.follows {
		select {
		case <-l.truth.Ready():
		case <-ctx.Done():
			return nil
		}
	}
	return c.Run(ctx)
}

// leaderName is the lease's holder as the bucket has it, or empty.
func (l *leadership) leaderName(ctx context.Context, js jetstream.JetStream) string {
	l.mu.Lock()
	kv := l.kv
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if kv == nil {
		var err error
		if kv, err = js.KeyValue(ctx, journal.DefaultBucket); err != nil {
			return ""
		}
		l.mu.Lock()
		l.kv = kv
		l.mu.Unlock()
	}
	e, err := kv.Get(ctx, journal.LeaseKey)
	if err != nil {
		return ""
	}
	return string(e.Value())
}

// leading says whether the campaign leads now.
func (l *leadership) leading() bool {
	_, ok := l.fence()
	return ok
}

// httpAddr is the HTTP address served, the follower's or the
// controller's.
func (l *leadership) httpAddr() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// served records addr as the HTTP address served; the first makes the
// part ready. A port 0 asked for is the port bound from then on.
func (l *leadership) served(addr string) {
	l.mu.Lock()
	l.addr, l.listen = addr, addr
	l.mu.Unlock()
	l.once.Do(func() { close(l.ready) })
}

// run follows until the campaign leads, leads until it does not, and
// again, until ctx ends.
func (l *leadership) run(ctx context.Context) error {
	select {
	case <-l.started:
	case <-ctx.Done():
		return nil
	}
	for ctx.Err() == nil {
		if err := l.follow(ctx); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := l.lead(ctx); err != nil {
			return err
		}
	}
	return nil
}

// follow serves the HTTP address with what a follower says until the
// campaign leads or ctx ends.
func (l *leadership) follow(ctx context.Context) error {
	if l.leading() {
		return nil
	}
	l.mu.Lock()
	listen := l.listen
	l.mu.Unlock()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("bind http address %s: %w", listen, err)
	}
	if !onLoopback(listen) {
		cert, err := l.auth.IssueServer(nil, listenIPs(ln.Addr()), 24*time.Hour)
		if err != nil {
			ln.Close()
			return fmt.Errorf("issue the follower's HTTP certificate: %w", err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	l.mu.Lock()
	js := l.js
	l.mu.Unlock()
	srv := &http.Server{Handler: l.followerHandler(ctx, js), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	l.served(ln.Addr().String())
	l.log.Info("following", "leader", l.leaderName(ctx, js), "http", ln.Addr().String())
	tick := time.NewTicker(leadPoll)
	defer tick.Stop()
	lastSync := time.Time{}
	for !l.leading() && ctx.Err() == nil {
		if l.syncUsers != nil && time.Since(lastSync) >= usersEvery {
			if err := l.syncUsers(ctx); err != nil && ctx.Err() == nil {
				l.log.Warn("the bus's users were not brought up to the view; tried again soon", "err", err)
			}
			lastSync = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		case err := <-done:
			return fmt.Errorf("follower's http listener: %w", err)
		}
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	return nil
}

// followerHandler answers /healthz with the follower's standing, and
// every other path with where the leader is.
func (l *leadership) followerHandler(ctx context.Context, js jetstream.JetStream) http.Handler {
	say := func(w http.ResponseWriter, code int) {
		leader := l.leaderName(ctx, js)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		if leader == "" {
			fmt.Fprintln(w, "follower, no controller leads")
			return
		}
		fmt.Fprintf(w, "follower, leader is %s\n", leader)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { say(w, http.StatusOK) })
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { say(w, http.StatusServiceUnavailable) })
	return mux
}

// lead runs a new controller while the campaign leads, once the view has
// applied every entry a former leader wrote; it returns when the
// controller stopped, on a step-down or as ctx ended, and fails only
// with a controller that failed while leading.
func (l *leadership) lead(ctx context.Context) error {
	lctx, stepDown := context.WithCancel(ctx)
	defer stepDown()
	go func() {
		tick := time.NewTicker(leadPoll)
		defer tick.Stop()
		for l.leading() {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
		}
		stepDown()
	}()
	if err := l.truth.CaughtUp(lctx); err != nil {
		if lctx.Err() != nil {
			return nil
		}
		// The log unread for a while (its stream electing a leader, a
		// request sent to a peer cut off) is a cluster in flux too: this
		// machine follows a moment and tries again while it leads.
		l.log.Error("the store's log was not read while leading; tried again soon", "server", l.name, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(leadRetry):
		}
		return nil
	}
	l.mu.Lock()
	listen := l.listen
	l.mu.Unlock()
	ctl, err := l.newCtl(listen)
	if err != nil {
		return err
	}
	l.log.Info("leading: the controller starts", "server", l.name)
	done := make(chan error, 1)
	go func() { done <- ctl.Run(lctx) }()
	select {
	case <-ctl.Ready():
		l.served(ctl.HTTPAddr())
		l.serving.Store(true)
		err = <-done
		l.serving.Store(false)
	case err = <-done:
	}
	if lctx.Err() != nil && ctx.Err() == nil {
		l.log.Warn("no longer leading: the controller stopped", "server", l.name, "err", err)
		return nil
	}
	if err != nil && ctx.Err() == nil {
		// A cluster in flux (a peer restarting, JetStream electing) fails
		// a controller's start: this machine follows a moment and leads
		// again while it holds the lease, rather than taking its bus, and
		// the fleet's, down.
		l.log.Error("the controller stopped while leading; it starts again", "server", l.name, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(leadRetry):
		}
		return nil
	}
	return err
}

// onLoopback says whether listen is on a loopback address.
func onLoopback(listen string) bool {
	h, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// listenIPs are the addresses a certificate for a listener bound at addr
// names: its own, or loopback's when it is unspecified.
func listenIPs(addr net.Addr) []net.IP {
	if ta, ok := addr.(*net.TCPAddr); ok && !ta.IP.IsUnspecified() {
		return []net.IP{ta.IP}
	}
	return []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
}

// followerUsers brings the users of bus up to what the view db holds,
// when they changed: a follower's own server admits the nodes, operators
// and tokens the leader admitted. A token's enrolment user gone from the
// view (its token used) is kept enrolGrace more: the joining host may be
// connected here, waiting for the leader's answer, which a withdrawal
// would cut off ("the bus closed the connection before the controller
// answered"); the leader keeps it so on its own server.
func followerUsers(db *store.DB, bus *broker.Server, keys mesh.Keys) func(context.Context) error {
	return syncUsers(bus, func(ctx context.Context) ([]broker.User, error) {
		return mesh.Users(ctx, db, keys, time.Now())
	})
}

// syncUsers puts the users read says in force on bus when they changed,
// keeping the enrolment users it leaves out enrolGrace (keepEnrolments).
// What it last put in force starts as the users the bus started with: a
// controller started again (its peer set grew) admits a joining host
// from its view at once, and must not cut that host off when its first
// sync finds the token used meanwhile.
func syncUsers(bus *broker.Server, read func(context.Context) ([]broker.User, error)) func(context.Context) error {
	var last []broker.User
	started := false
	gone := map[string]time.Time{} // enrolment users left out, since when
	return func(ctx context.Context) error {
		if !started {
			last, started = bus.Users(), true
		}
		users, err := read(ctx)
		if err != nil {
			return err
		}
		users = keepEnrolments(last, users, gone, time.Now())
		slices.SortFunc(users, func(a, b broker.User) int { return strings.Compare(a.NKey, b.NKey) })
		if reflect.DeepEqual(users, last) {
			return nil
		}
		if err := bus.SetUsers(users); err != nil {
			return err
		}
		last = users
		return nil
	}
}

// keepEnrolments is users with the enrolment users of last they left
// out, each for enrolGrace from when it was first left out (gone, by
// key, kept from call to call).
func keepEnrolments(last, users []broker.User, gone map[string]time.Time, now time.Time) []broker.User {
	present := map[string]bool{}
	for _, u := range users {
		present[u.NKey] = true
	}
	for _, u := range last {
		if present[u.NKey] || !enrolment(u) {
			continue
		}
		if _, ok := gone[u.NKey]; !ok {
			gone[u.NKey] = now
		}
		if now.Sub(gone[u.NKey]) < enrolGrace {
			users = append(users, u)
		}
	}
	for k := range gone {
		if present[k] || now.Sub(gone[k]) >= enrolGrace {
			delete(gone, k)
		}
	}
	return users
}

// enrolGrace is how long a follower keeps a used token's enrolment user.
const enrolGrace = 10 * time.Second

// enrolment says whether u is a token's enrolment user: it may publish
// on the enrolment subject alone.
func enrolment(u broker.User) bool {
	return !u.Full && len(u.Publish) == 1 && u.Publish[0] == spec.EnrolSubject
}
