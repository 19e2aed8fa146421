package journal_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/lease"
	"github.com/mesh-fleet/mesh/store"
)

// leaseTTL is the fenced tests' lease TTL: renewals every second.
const leaseTTL = 3 * time.Second

// cluster is n buses on loopback routed as one cluster, with the
// controller's user, each reached on its own: when one stops, its
// clients' requests fail.
type cluster struct {
	auth  *ca.Authority
	key   nkeys.KeyPair
	srvs  []*broker.Server
	stops []func()
}

// startCluster starts n servers and waits until each routes to every
// other.
func startCluster(t testing.TB, n int) *cluster {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := nkeys.CreateUser()
	pub, _ := key.PublicKey()
	routes := make([]string, n)
	for i := range routes {
		routes[i] = testport.Addr(t, "127.0.0.1")
	}
	c := &cluster{auth: auth, key: key}
	for i := range n {
		cert, err := auth.IssueServer([]string{"mesh-bus"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := broker.New(broker.Config{
			Listen:   "127.0.0.1:0",
			StoreDir: t.TempDir(),
			TLS:      &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			Users:    []broker.User{{NKey: pub, Full: true}},
			Cluster: &broker.Cluster{Name: "mesh", ServerName: fmt.Sprintf("c%d", i), Listen: routes[i], Peers: routes,
				Cert: cert, Root: auth.Root(), TLSName: "mesh-bus", User: "route", Password: "secret"},
		}, quiet())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		var once sync.Once
		stop := func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		select {
		case <-srv.Ready():
		case err := <-done:
			t.Fatalf("bus %d stopped before ready: %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("bus %d not ready after 30s", i)
		}
		c.srvs = append(c.srvs, srv)
		c.stops = append(c.stops, stop)
	}
	for i, srv := range c.srvs {
		poll.Until(t, 30*time.Second, fmt.Sprintf("bus %d routes to every other", i), func() error {
			if len(srv.Peers()) == n-1 {
				return nil
			}
			return fmt.Errorf("routes to %q", srv.Peers())
		})
	}
	return c
}

// connect is how a journal or a campaign reaches server i, and only it.
func (c *cluster) connect(t testing.TB, i int) func(context.Context) (jetstream.JetStream, error) {
	return func(context.Context) (jetstream.JetStream, error) {
		pub, _ := c.key.PublicKey()
		nc, err := nats.Connect("nats://"+c.srvs[i].Addr(), nats.Nkey(pub, c.key.Sign),
			nats.Secure(ca.ClientTLS(c.auth.Root(), "mesh-bus")), nats.TLSHandshakeFirst(),
			nats.Timeout(10*time.Second))
		if err != nil {
			return nil, err
		}
		t.Cleanup(nc.Close)
		return jetstream.New(nc)
	}
}

func (c *cluster) js(t testing.TB, i int) jetstream.JetStream {
	t.Helper()
	js, err := c.connect(t, i)(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// controller is one controller of the tests: a campaign and a journal
// fenced by it, on one server of the cluster.
type controller struct {
	name     string
	campaign *lease.Campaign
	paused   pauser
	view     *journal.View
	// stale, when set, is the fence the journal reports instead of the
	// campaign's: a leader not yet told it was deposed.
	stale atomic.Pointer[lease.State]
	// path is the journal's store, once it started; putBack its
	// put-back mark (empty: none).
	path, putBack string
	// stopJournal stops the journal and closes its store, as the test's
	// end does.
	stopJournal func()
}

// fence is the journal's Fence: the campaign's standing, or the stale
// one.
func (c *controller) fence() (uint64, bool) {
	if st := c.stale.Load(); st != nil {
		return st.Revision, st.Leading
	}
	st, _ := c.campaign.Leader()
	return st.Revision, st.Leading
}

func (c *controller) state() lease.State {
	st, _ := c.campaign.Leader()
	return st
}

// startCampaign starts c's campaign through js, its clock now.
func (c *controller) startCampaign(t testing.TB, js jetstream.JetStream, now func() time.Time) {
	t.Helper()
	camp, err := lease.New(lease.Config{Bucket: journal.DefaultBucket, Key: journal.LeaseKey, Name: c.name, TTL: leaseTTL}, quiet(),
		lease.Deps{JS: js, Now: now, Pause: c.paused.wait})
	if err != nil {
		t.Fatal(err)
	}
	c.campaign = camp
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- camp.Run(ctx) }()
	t.Cleanup(func() { c.paused.resume(); cancel(); <-done })
}

// startJournal runs c's journal on the store at path through connect,
// and waits until it is ready. Its Run's error is not the test's: its
// server may be stopped under it.
func (c *controller) startJournal(t testing.TB, path string, connect func(context.Context) (jetstream.JetStream, error)) {
	t.Helper()
	c.path = path
	db, err := store.OpenWith(context.Background(), path, store.Options{ViewOfLog: true})
	if err != nil {
		t.Fatal(err)
	}
	// The journal's connection is closed as it stops: a consumer's Next
	// on a connection to a server stopped waits on after Stop.
	var conn atomic.Pointer[nats.Conn]
	jconnect := func(ctx context.Context) (jetstream.JetStream, error) {
		js, err := connect(ctx)
		if err == nil {
			conn.Store(js.Conn())
		}
		return js, err
	}
	j := journal.New(journal.Config{Replicas: 3, Fence: c.fence, PutBackMark: c.putBack}, quiet(), db, jconnect)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if nc := conn.Load(); nc != nil {
				nc.Close()
			}
			<-done
			db.Close()
		})
	}
	c.stopJournal = stop
	t.Cleanup(stop)
	select {
	case <-j.Ready():
	case err := <-done:
		t.Fatalf("journal %s stopped before ready: %v", c.name, err)
	case <-time.After(60 * time.Second):
		t.Fatalf("journal %s not ready after 60s", c.name)
	}
	c.view = j.Store()
}

// pauser holds a campaign's attempts while paused, as a stopped process
// would be held.
type pauser struct {
	mu      sync.Mutex
	held    chan struct{}
	waiting bool
}

func (p *pauser) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

func (p *pauser) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

func (p *pauser) wait() {
	p.mu.Lock()
	held := p.held
	p.waiting = held != nil
	p.mu.Unlock()
	if held != nil {
		<-held
	}
	p.mu.Lock()
	p.waiting = false
	p.mu.Unlock()
}

func (p *pauser) isHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

// fencedControllers starts three servers and a controller on each, the
// clocks of their campaigns nows (nil: time.Now); the first to lead
// begins the log, and the others' views are rebuilt from it. It returns
// them and the leader's index.
func fencedControllers(t testing.TB, nows ...func() time.Time) (*cluster, []*controller, int) {
	t.Helper()
	c := startCluster(t, 3)
	poll.Until(t, 60*time.Second, "the log's bucket is made, replicated", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := lease.Bucket(ctx, c.js(t, 0), jetstream.KeyValueConfig{Bucket: journal.DefaultBucket, History: 1,
			Storage: jetstream.FileStorage, Replicas: 3})
		return err
	})
	cs := make([]*controller, 3)
	for i := range cs {
		var now func() time.Time
		if i < len(nows) {
			now = nows[i]
		}
		cs[i] = &controller{name: fmt.Sprintf("c%d", i)}
		cs[i].startCampaign(t, c.js(t, i), now)
	}
	lead := waitLeading(t, 30*time.Second, "one of three leads", cs, -1)
	cs[lead].startJournal(t, filepath.Join(t.TempDir(), "mesh.db"), c.connect(t, lead))
	for i := range cs {
		if i == lead {
			continue
		}
		path := filepath.Join(t.TempDir(), "mesh.db")
		if err := journal.Rebuild(context.Background(), c.js(t, i), journal.Config{}, path); err != nil {
			t.Fatal(err)
		}
		cs[i].startJournal(t, path, c.connect(t, i))
	}
	return c, cs, lead
}

// waitLeading waits until one of cs but not leads, failing t if two ever
// lead at once, and returns its index.
func waitLeading(t testing.TB, within time.Duration, what string, cs []*controller, not int) int {
	t.Helper()
	found := -1
	poll.Until(t, within, what, func() error {
		var names []string
		found = -1
		for i, c := range cs {
			if c.state().Leading {
				names = append(names, c.name)
				if i != not {
					found = i
				}
			}
		}
		if len(names) > 1 {
			t.Fatalf("%s: two lead at once: %q", what, names)
		}
		if found >= 0 {
			return nil
		}
		return fmt.Errorf("leading: %q", names)
	})
	return found
}

// audit writes one audit entry of verb through v.
func audit(v *journal.View, verb string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return v.Audit(ctx, store.AuditEntry{At: time.Now(), Operator: "op", Verb: verb, Args: "{}", Outcome: "ok"})
}

// audited are the verbs v's audit holds, in order.
func audited(t testing.TB, v *journal.View) []string {
	t.Helper()
	got, err := v.AuditSince(context.Background(), time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, e := range got {
		verbs = append(verbs, e.Verb)
	}
	return verbs
}

// lastEntry is the revision of the log's last entry, through js.
func lastEntry(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, "KV_"+journal.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, lease.Subject(journal.DefaultBucket, "w.>"))
	if err != nil {
		t.Fatal(err)
	}
	return msg.Sequence
}

// TestDeposedLeaderWriteIsRefused: the leader's writes reach every view;
// once another controller took the lease, a write of the deposed one,
// which still believes it leads, is refused by the bus (lease.ErrFenced)
// and leaves the log as it was, while the new leader's is stored; and a
// controller that knows it does not lead refuses to write, naming the
// leader.
func TestDeposedLeaderWriteIsRefused(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three servers and a lease taken over")
	c, cs, old := fencedControllers(t)
	if err := audit(cs[old].view, "first"); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
	held := cs[old].state()
	cs[old].stale.Store(&held)

	cs[old].paused.pause()
	next := waitLeading(t, 30*time.Second, "another leads while the leader is paused", cs, old)
	before := lastEntry(t, c.js(t, next))
	err := audit(cs[old].view, "late")
	if !errors.Is(err, lease.ErrFenced) {
		t.Fatalf("the deposed leader's write: %v, want %v", err, lease.ErrFenced)
	}
	if after := lastEntry(t, c.js(t, next)); after != before {
		t.Fatalf("the refused write moved the log from %d to %d", before, after)
	}
	if err := audit(cs[next].view, "second"); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	for _, ctl := range cs {
		poll.Until(t, 10*time.Second, ctl.name+"'s view has the leaders' writes alone", func() error {
			got := fmt.Sprint(audited(t, ctl.view))
			if got == "[first second]" {
				return nil
			}
			return errors.New(got)
		})
	}

	cs[old].stale.Store(nil)
	follower := 3 - old - next
	err = audit(cs[follower].view, "follower")
	if !errors.Is(err, journal.ErrNotLeading) {
		t.Fatalf("a follower's write: %v, want %v", err, journal.ErrNotLeading)
	}
	if want := "the leader is " + cs[next].name; !strings.Contains(err.Error(), want) {
		t.Fatalf("a follower's write: %v, want it to say %q", err, want)
	}
}

// TestPausedCampaignWritesAreRefused: a leader whose process is paused
// past the TTL does not lead on resume, and its journal's writes are
// refused, while the leader that took over writes.
func TestPausedCampaignWritesAreRefused(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three servers and a lease waited out")
	_, cs, old := fencedControllers(t)
	cs[old].paused.pause()
	poll.Until(t, leaseTTL, "the leader's campaign is held", func() error {
		if cs[old].paused.isHeld() {
			return nil
		}
		return errors.New("not yet")
	})
	next := waitLeading(t, 30*time.Second, "another leads while the leader is paused", cs, old)
	cs[old].paused.resume()
	if st := cs[old].state(); st.Leading {
		t.Fatalf("the resumed leader leads beside %s: %+v", cs[next].name, st)
	}
	if err := audit(cs[old].view, "late"); err == nil {
		t.Fatal("the resumed leader's write was stored")
	}
	if err := audit(cs[next].view, "new"); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
	poll.Until(t, leaseTTL, "the resumed campaign steps down", func() error {
		st := cs[old].state()
		if st.Role == lease.Follower {
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
	poll.Until(t, 10*time.Second, "the resumed controller's view has the new leader's write alone", func() error {
		got := fmt.Sprint(audited(t, cs[old].view))
		if got == "[new]" {
			return nil
		}
		return errors.New(got)
	})
}

// TestLeaderServerDownAnotherLeads: the leader's bus server shut down,
// another controller leads within the TTL and its writes are stored.
func TestLeaderServerDownAnotherLeads(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three servers, the leader's shut down")
	c, cs, old := fencedControllers(t)
	if err := audit(cs[old].view, "before"); err != nil {
		t.Fatal(err)
	}
	c.stops[old]()
	began := time.Now()
	next := waitLeading(t, 30*time.Second, "another leads", cs, old)
	// The bus keeps the key a TTL after its last renewal, and a
	// campaigner's attempt comes within a third of it after that.
	if took := time.Since(began); took > leaseTTL+leaseTTL/3+time.Second {
		t.Fatalf("another led %s after the leader's server went, want within the TTL", took)
	}
	poll.Until(t, 10*time.Second, "the new leader's write", func() error { return audit(cs[next].view, "after") })
	got := fmt.Sprint(audited(t, cs[next].view))
	if got != "[before after]" {
		t.Fatalf("the new leader's view: %s", got)
	}
}

// TestClockSkewDoesNotChangeTheLeader: controllers whose clocks are a
// minute ahead and a minute behind change nothing: the leader keeps the
// lease through its renewals, no other leads, and its writes are stored.
func TestClockSkewDoesNotChangeTheLeader(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three servers and a lease renewed at ±60 s skew")
	skewed := func(d time.Duration) func() time.Time { return func() time.Time { return time.Now().Add(d) } }
	_, cs, lead := fencedControllers(t, skewed(time.Minute), nil, skewed(-time.Minute))
	first := cs[lead].state().Revision
	renewals := 0
	last := first
	poll.Until(t, 4*leaseTTL, "the leader renews three times", func() error {
		for i, c := range cs {
			if st := c.state(); i != lead && st.Leading {
				t.Fatalf("%s leads beside %s", c.name, cs[lead].name)
			}
		}
		st := cs[lead].state()
		if !st.Leading {
			t.Fatalf("%s stopped leading: %+v", cs[lead].name, st)
		}
		if st.Revision != last {
			renewals++
			last = st.Revision
		}
		if renewals >= 3 {
			return nil
		}
		return fmt.Errorf("%d renewals", renewals)
	})
	if err := audit(cs[lead].view, "skewed"); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
}

// TestConcurrentFencedWritesAllLand: the leader's writers write at once,
// eight of them, through a log kept by three servers. Each write lands:
// the bus refuses a fenced batch while another that expects the lease's
// revision is in flight, as it refuses a deposed leader's, and the
// journal sends its batches one at a time and again when the lease's
// renewal crossed one.
func TestConcurrentFencedWritesAllLand(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three servers and a lease")
	_, cs, lead := fencedControllers(t)
	const writers, each = 8, 25
	errs := make(chan error, writers*each)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := audit(cs[lead].view, fmt.Sprintf("w%d-%d", w, i)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var failed []string
	for err := range errs {
		failed = append(failed, err.Error())
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d writes failed, the first: %s", len(failed), writers*each, failed[0])
	}
	got, err := cs[lead].view.AuditSince(context.Background(), time.Time{}, 2*writers*each)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*each {
		t.Fatalf("the audit holds %d entries, want %d", len(got), writers*each)
	}
}
