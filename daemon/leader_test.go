package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// testLeaseTTL is the leadership tests' lease TTL.
const testLeaseTTL = 3 * time.Second

// startRouted starts n buses on loopback routed as one cluster, each
// reached on its own, and returns them, how to stop each, and how to
// reach each as the controller.
func startRouted(t *testing.T, n int) ([]*broker.Server, []func(), func(i int) func(context.Context) (jetstream.JetStream, error)) {
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
	var srvs []*broker.Server
	var stops []func()
	for i := range n {
		cert, err := auth.IssueServer([]string{spec.BusTLSName}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := broker.New(broker.Config{
			Listen: "127.0.0.1:0", StoreDir: t.TempDir(),
			TLS:   &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			Users: []broker.User{{NKey: pub, Full: true}},
			Cluster: &broker.Cluster{Name: "mesh", ServerName: fmt.Sprintf("c%d", i), Listen: routes[i], Peers: routes,
				Cert: cert, Root: auth.Root(), TLSName: spec.BusTLSName, User: "route", Password: "secret"},
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
		srvs = append(srvs, srv)
		stops = append(stops, stop)
	}
	for i, srv := range srvs {
		poll.Until(t, 30*time.Second, fmt.Sprintf("bus %d routes to every other", i), func() error {
			if len(srv.Peers()) == n-1 {
				return nil
			}
			return fmt.Errorf("routes to %q", srv.Peers())
		})
	}
	addrs := make([]string, n)
	for i, srv := range srvs {
		addrs[i] = srv.Addr()
	}
	connect := func(i int) func(context.Context) (jetstream.JetStream, error) {
		return func(context.Context) (jetstream.JetStream, error) {
			nc, err := nats.Connect("nats://"+addrs[i], nats.Nkey(pub, key.Sign),
				nats.Secure(ca.ClientTLS(auth.Root(), spec.BusTLSName)), nats.TLSHandshakeFirst(), nats.Timeout(10*time.Second))
			if err != nil {
				return nil, err
			}
			t.Cleanup(nc.Close)
			return jetstream.New(nc)
		}
	}
	return srvs, stops, connect
}

// fakeController stands for a controller: it serves /healthz on its
// address while it runs, and counts the controllers running.
type fakeController struct {
	listen  string
	running *atomic.Int32
	ready   chan struct{}
	addr    string
}

func (f *fakeController) Ready() <-chan struct{} { return f.ready }
func (f *fakeController) HTTPAddr() string       { return f.addr }

func (f *fakeController) Run(ctx context.Context) error {
	if n := f.running.Add(1); n > 1 {
		return fmt.Errorf("%d controllers run at once", n)
	}
	defer f.running.Add(-1)
	l, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "leader") })}
	go srv.Serve(l)
	f.addr = l.Addr().String()
	close(f.ready)
	<-ctx.Done()
	return srv.Close()
}

// testLeader is one controller's leadership in the tests, and the
// controllers it made.
type testLeader struct {
	*leadership
	made atomic.Int32
	done chan error
}

// healthz is what GET /healthz at l's HTTP address answers.
func healthz(addr string) string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

// TestOneControllerLeadsAndFollowersSayWho: three controllers of a
// cluster, each on its own server: one runs the controller, the others
// hold their HTTP address saying who leads and answer on the role
// subject; the leader's server shut down, another runs a controller of
// its own within the TTL, never two at once, and its writes are stored.
func TestOneControllerLeadsAndFollowersSayWho(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three servers and a leader taken over")
	_, stops, connect := startRouted(t, 3)
	poll.Until(t, 60*time.Second, "the log's bucket is made, replicated", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		js, err := connect(0)(ctx)
		if err != nil {
			return err
		}
		_, err = lease.Bucket(ctx, js, jetstream.KeyValueConfig{Bucket: journal.DefaultBucket, History: 1,
			Storage: jetstream.FileStorage, Replicas: 3})
		return err
	})
	running := new(atomic.Int32)
	ls := make([]*testLeader, 3)
	for i := range ls {
		st := &ClusterState{Server: fmt.Sprintf("c%d", i), Peers: []Peer{{Server: "c0"}, {Server: "c1"}, {Server: "c2"}}}
		lead := newLeadership(st, testLeaseTTL, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, connect(i))
		tl := &testLeader{leadership: lead, done: make(chan error, 1)}
		lead.listen = testport.Addr(t, "127.0.0.1")
		lead.newCtl = func(listen string) (runner, error) {
			tl.made.Add(1)
			return &fakeController{listen: listen, running: running, ready: make(chan struct{})}, nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { tl.done <- lead.runCampaign(ctx) }()
		t.Cleanup(func() { cancel(); <-tl.done })
		ls[i] = tl
	}
	leader := func(not int) int {
		found := -1
		poll.Until(t, 30*time.Second, "one leads", func() error {
			found = -1
			for i, l := range ls {
				if i != not && l.campaign.Load() != nil && l.leading() {
					found = i
				}
			}
			if found >= 0 {
				return nil
			}
			return errors.New("none yet")
		})
		return found
	}
	first := leader(-1)
	// The leader begins the log; the others' views are rebuilt from it.
	views := make([]*journal.View, 3)
	for _, i := range append([]int{first}, others(first)...) {
		path := filepath.Join(t.TempDir(), "mesh.db")
		if i != first {
			js, err := connect(i)(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if err := journal.Rebuild(context.Background(), js, journal.Config{}, path); err != nil {
				t.Fatal(err)
			}
		}
		db, err := store.OpenWith(context.Background(), path, store.Options{ViewOfLog: true})
		if err != nil {
			t.Fatal(err)
		}
		// The journal's connection is closed as it stops: a consumer's
		// Next on a connection to a server stopped waits on after Stop.
		var conn atomic.Pointer[nats.Conn]
		jconnect := func(ctx context.Context) (jetstream.JetStream, error) {
			js, err := connect(i)(ctx)
			if err == nil {
				conn.Store(js.Conn())
			}
			return js, err
		}
		j := journal.New(journal.Config{Replicas: 3, Fence: ls[i].fence}, slog.New(slog.NewTextHandler(io.Discard, nil)), db, jconnect)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- j.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if nc := conn.Load(); nc != nil {
				nc.Close()
			}
			<-done
			db.Close()
		})
		select {
		case <-j.Ready():
		case err := <-done:
			t.Fatalf("journal %d: %v", i, err)
		case <-time.After(60 * time.Second):
			t.Fatalf("journal %d not ready", i)
		}
		ls[i].truth, views[i] = j, j.Store()
		ctx, cancel = context.WithCancel(context.Background())
		runDone := make(chan error, 1)
		go func() { runDone <- ls[i].run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-runDone; err != nil {
				t.Errorf("leadership %d: %v", i, err)
			}
		})
	}
	for i, l := range ls {
		want := "follower, leader is " + ls[first].name
		if i == first {
			want = "leader"
		}
		poll.Until(t, 10*time.Second, fmt.Sprintf("controller %d's /healthz", i), func() error {
			got := healthz(l.httpAddr())
			if got == want {
				return nil
			}
			return errors.New(got)
		})
	}
	if n := running.Load(); n != 1 {
		t.Fatalf("%d controllers run, want 1", n)
	}
	roles := askRoles(t, connect(others(first)[0]))
	if !strings.Contains(roles, "c"+fmt.Sprint(first)+" leader") {
		t.Fatalf("the roles answered: %s", roles)
	}

	stops[first]()
	began := time.Now()
	next := leader(first)
	if took := time.Since(began); took > testLeaseTTL+testLeaseTTL/3+time.Second {
		t.Fatalf("another led %s after the leader's server went, want within the TTL", took)
	}
	poll.Until(t, 10*time.Second, "the new leader runs a controller of its own", func() error {
		if ls[next].made.Load() == 1 && healthz(ls[next].httpAddr()) == "leader" {
			return nil
		}
		return errors.New(healthz(ls[next].httpAddr()))
	})
	poll.Until(t, 10*time.Second, "the deposed leader's controller stops", func() error {
		if running.Load() == 1 {
			return nil
		}
		return fmt.Errorf("%d running", running.Load())
	})
	poll.Until(t, 10*time.Second, "the new leader writes", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return views[next].Audit(ctx, store.AuditEntry{At: time.Now(), Operator: "op", Verb: "after", Args: "{}", Outcome: "ok"})
	})
}

// others are the controllers' indexes but i.
func others(i int) []int {
	var out []int
	for k := range 3 {
		if k != i {
			out = append(out, k)
		}
	}
	return out
}

// askRoles asks every controller its role, through connect, and lists
// the answers as "server role" lines, sorted.
func askRoles(t *testing.T, connect func(context.Context) (jetstream.JetStream, error)) string {
	t.Helper()
	js, err := connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	nc := js.Conn()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(spec.ControllerRoleSubject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for len(lines) < 3 {
		msg, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			break
		}
		var role spec.ControllerRole
		if err := spec.DecodeReply(msg.Data, &role); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, role.Server+" "+role.Role)
	}
	return strings.Join(lines, ", ")
}
