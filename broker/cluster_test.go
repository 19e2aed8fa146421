package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// routeName is the name the test's route certificates carry.
const routeName = "mesh-bus"

// member is one server of a test cluster: its configuration, kept across
// its restarts, and the server running it.
type member struct {
	cfg  broker.Config
	logs *logBuffer
	srv  *broker.Server
	stop func()
}

// testCluster is servers on loopback that route to one another, and the
// controller's user, which every one admits.
type testCluster struct {
	auth    *ca.Authority
	ctl     nkeys.KeyPair
	members []*member
}

// newCluster configures n servers whose route certificates cert issues
// (nil: the mesh's CA), and starts none.
func newCluster(t *testing.T, n int, cert func(i int) tls.Certificate) *testCluster {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctl, ctlPub := newUser(t)
	routes := make([]string, n)
	for i := range routes {
		routes[i] = testport.Addr(t, "127.0.0.1")
	}
	c := &testCluster{auth: auth, ctl: ctl}
	for i := range n {
		busCert, err := auth.IssueServer([]string{"bus.mesh"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		routeCert := c.routeCert(t, auth)
		if cert != nil {
			routeCert = cert(i)
		}
		c.members = append(c.members, &member{logs: &logBuffer{}, cfg: broker.Config{
			Listen:   "127.0.0.1:0",
			StoreDir: t.TempDir(),
			TLS:      &tls.Config{Certificates: []tls.Certificate{busCert}, MinVersion: tls.VersionTLS12},
			Users:    []broker.User{{NKey: ctlPub, Full: true}},
			Cluster: &broker.Cluster{
				Name:       "mesh",
				ServerName: fmt.Sprintf("c%d", i),
				Listen:     routes[i],
				Peers:      routes,
				Cert:       routeCert,
				Root:       auth.Root(),
				TLSName:    routeName,
				User:       "route",
				Password:   "route-secret",
			},
		}})
	}
	return c
}

// routeCert is a route certificate auth issues.
func (c *testCluster) routeCert(t *testing.T, auth *ca.Authority) tls.Certificate {
	t.Helper()
	cert, err := auth.IssueServer([]string{routeName}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// start runs member i on its configuration, its store as its last run
// left it, and returns once it accepts connections.
func (c *testCluster) start(t *testing.T, i int) {
	t.Helper()
	m := c.members[i]
	srv, err := broker.New(m.cfg, slog.New(slog.NewTextHandler(m.logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	m.srv = srv
	m.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("server %d: %v", i, err)
			}
		})
	}
	t.Cleanup(m.stop)
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("server %d stopped before ready: %v", i, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("server %d not ready after 30s: %s", i, m.logs)
	}
}

// startAll starts every member, and waits until each routes to all others.
func (c *testCluster) startAll(t *testing.T) {
	t.Helper()
	for i := range c.members {
		c.start(t, i)
	}
	c.waitRouted(t)
}

// waitRouted waits until every member has a route to every other.
func (c *testCluster) waitRouted(t *testing.T) {
	t.Helper()
	for i, m := range c.members {
		want := slices.DeleteFunc(c.names(), func(n string) bool { return n == m.cfg.Cluster.ServerName })
		poll.Until(t, 30*time.Second, fmt.Sprintf("server %d routes to every other", i), func() error {
			got := m.srv.Peers()
			if slices.Equal(got, want) {
				return nil
			}
			return fmt.Errorf("routes to %q, want %q", got, want)
		})
	}
}

func (c *testCluster) names() []string {
	var names []string
	for _, m := range c.members {
		names = append(names, m.cfg.Cluster.ServerName)
	}
	return names
}

// js is JetStream through member i, as the controller's user.
func (c *testCluster) js(t *testing.T, i int) jetstream.JetStream {
	t.Helper()
	pub, _ := c.ctl.PublicKey()
	nc, err := nats.Connect("nats://"+c.members[i].srv.Addr(),
		nats.Nkey(pub, c.ctl.Sign),
		nats.Secure(ca.ClientTLS(c.auth.Root(), "bus.mesh")),
		nats.TLSHandshakeFirst(),
		nats.Timeout(10*time.Second),
		nats.NoReconnect(),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// logBuffer is a server's log, read by a test while the server writes it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// publish publishes data to subject, waiting at most within for the ack.
func publish(js jetstream.JetStream, subject, data string, within time.Duration) (*jetstream.PubAck, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return js.Publish(ctx, subject, []byte(data))
}

// TestClusterKeepsAcknowledgedWrites: three servers form a cluster, a
// stream of three replicas created through one accepts writes with one
// server down, refuses them with two down, and after all three restart on
// their stores holds every write it acknowledged.
func TestClusterKeepsAcknowledgedWrites(t *testing.T) {
	optin.NeedSlow(t, "three servers stopped and started, waiting for their elections")
	c := newCluster(t, 3, nil)
	c.startAll(t)
	js := c.js(t, 0)
	poll.Until(t, 60*time.Second, "a stream of three replicas is created", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
		return err
	})
	acked := map[uint64]string{}
	n := 0
	write := func(what string) {
		t.Helper()
		poll.Until(t, 60*time.Second, what, func() error {
			n++
			data := fmt.Sprintf("m%d", n)
			ack, err := publish(js, "t.x", data, 5*time.Second)
			if err != nil {
				return err
			}
			acked[ack.Sequence] = data
			return nil
		})
	}
	write("a publish to three servers is acknowledged")

	c.members[2].stop()
	for range 5 {
		write("a publish with one server of three down is acknowledged")
	}

	c.members[1].stop()
	for i := range 2 {
		if ack, err := publish(js, "t.x", fmt.Sprintf("refused%d", i), 3*time.Second); err == nil {
			t.Fatalf("a publish with two servers of three down was acknowledged: %+v", ack)
		}
	}

	c.members[0].stop()
	c.startAll(t)
	js = c.js(t, 1)
	var stream jetstream.Stream
	poll.Until(t, 60*time.Second, "the stream is served after the restart", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "T")
		if err != nil {
			return err
		}
		stream = s
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < uint64(len(acked)) {
		t.Errorf("the stream holds %d messages after the restart, %d were acknowledged", info.State.Msgs, len(acked))
	}
	for seq, data := range acked {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Errorf("acknowledged message %d (%s) after the restart: %v", seq, data, err)
			continue
		}
		if string(msg.Data) != data {
			t.Errorf("message %d after the restart is %q, acknowledged as %q", seq, msg.Data, data)
		}
	}
}

// TestClusterRefusesAForeignPeer: a server whose route certificate is not
// from the mesh's CA, or whose route credentials are wrong, is not routed
// to, while the mesh's own servers route to each other.
func TestClusterRefusesAForeignPeer(t *testing.T) {
	foreign, err := ca.Create(t.TempDir(), "foreign", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// stranger changes the third server's configuration.
		stranger func(*testing.T, *testCluster, *broker.Cluster)
		// refusal is what a mesh server logs of the stranger's route.
		refusal string
	}{
		{"certificate from a foreign CA", func(t *testing.T, c *testCluster, cl *broker.Cluster) {
			cl.Cert = c.routeCert(t, foreign)
		}, "TLS route handshake error"},
		{"wrong route password", func(_ *testing.T, _ *testCluster, cl *broker.Cluster) {
			cl.Password = "guessed"
		}, "authentication error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, nil)
			tc.stranger(t, c, c.members[2].cfg.Cluster)
			for i := range c.members {
				c.start(t, i)
			}
			for i, m := range c.members[:2] {
				other := fmt.Sprintf("c%d", 1-i)
				poll.Until(t, 30*time.Second, fmt.Sprintf("server %d routes to %s and refuses the stranger", i, other), func() error {
					peers := m.srv.Peers()
					refused := strings.Contains(m.logs.String(), tc.refusal)
					if slices.Equal(peers, []string{other}) && refused {
						return nil
					}
					return fmt.Errorf("routes to %q; refusal %q logged: %v", peers, tc.refusal, refused)
				})
			}
			for i, m := range c.members {
				if i < 2 && slices.Contains(m.srv.Peers(), "c2") {
					t.Errorf("server %d routes to the stranger", i)
				}
			}
			// The stranger dials again and again; each route it opens is
			// listed on its side until the mesh's server refuses it.
			poll.Until(t, 10*time.Second, "the stranger holds no route", func() error {
				peers := c.members[2].srv.Peers()
				if len(peers) == 0 {
					return nil
				}
				return fmt.Errorf("routes to %q", peers)
			})
		})
	}
}

// TestClusterRefusesLazySync: a cluster whose JetStream would not sync
// every write is refused; the bus's own configuration syncs every write,
// so a cluster on it is not.
func TestClusterRefusesLazySync(t *testing.T) {
	c := newCluster(t, 3, nil)
	cfg := c.members[0].cfg
	if _, err := broker.New(cfg, slog.New(slog.NewTextHandler(&logBuffer{}, nil))); err != nil {
		t.Fatalf("a cluster on the bus's own configuration: %v", err)
	}
	cfg.SyncInterval = 2 * time.Minute
	_, err := broker.New(cfg, slog.New(slog.NewTextHandler(&logBuffer{}, nil)))
	if err == nil || !strings.Contains(err.Error(), "sync every write") {
		t.Fatalf("a cluster syncing every 2m: %v, want a refusal saying it must sync every write", err)
	}
	cfg.Cluster = nil
	if _, err := broker.New(cfg, slog.New(slog.NewTextHandler(&logBuffer{}, nil))); err != nil {
		t.Fatalf("a lone bus syncing every 2m: %v", err)
	}
}

// TestClusterConfigIsChecked: a cluster configuration that cannot make a
// cluster is refused by New, naming what is wrong.
func TestClusterConfigIsChecked(t *testing.T) {
	c := newCluster(t, 3, nil)
	for _, tc := range []struct {
		name   string
		change func(*broker.Cluster)
		want   string
	}{
		{"no server name", func(cl *broker.Cluster) { cl.ServerName = "" }, "server name"},
		{"a cluster name with a space", func(cl *broker.Cluster) { cl.Name = "my mesh" }, "cluster name"},
		{"route port 0", func(cl *broker.Cluster) { cl.Listen = "127.0.0.1:0" }, "cluster address"},
		{"no peer", func(cl *broker.Cluster) { cl.Peers = []string{cl.Listen} }, "no peer"},
		{"a peer without a port", func(cl *broker.Cluster) { cl.Peers = append(cl.Peers, "10.0.0.1") }, "peer route address"},
		{"no certificate", func(cl *broker.Cluster) { cl.Cert = tls.Certificate{} }, "route certificate"},
		{"no root", func(cl *broker.Cluster) { cl.Root = nil }, "root"},
		{"no TLS name", func(cl *broker.Cluster) { cl.TLSName = "" }, "name the peers"},
		{"no password", func(cl *broker.Cluster) { cl.Password = "" }, "route credentials"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := c.members[0].cfg
			cl := *cfg.Cluster
			cl.Peers = slices.Clone(cl.Peers)
			tc.change(&cl)
			cfg.Cluster = &cl
			_, err := broker.New(cfg, slog.New(slog.NewTextHandler(&logBuffer{}, nil)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestStandingUserOutlivesSetUsers: a standing user stays admitted when
// the users are replaced, and is refused once withdrawn.
func TestStandingUserOutlivesSetUsers(t *testing.T) {
	c := newCluster(t, 1, nil)
	c.members[0].cfg.Cluster = nil
	c.start(t, 0)
	srv := c.members[0].srv
	kp, pub := newUser(t)
	if err := srv.AddStandingUser(broker.User{NKey: pub, Publish: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	ctlPub, _ := c.ctl.PublicKey()
	if err := srv.SetUsers([]broker.User{{NKey: ctlPub, Full: true}}); err != nil {
		t.Fatal(err)
	}
	connect := func() error {
		nc, err := nats.Connect("nats://"+srv.Addr(), nats.Nkey(pub, kp.Sign),
			nats.Secure(ca.ClientTLS(c.auth.Root(), "bus.mesh")), nats.TLSHandshakeFirst(), nats.NoReconnect())
		if err == nil {
			nc.Close()
		}
		return err
	}
	if err := connect(); err != nil {
		t.Fatalf("a standing user after SetUsers: %v", err)
	}
	srv.WithdrawStandingUser(pub)
	if err := connect(); err == nil {
		t.Fatal("a withdrawn standing user was admitted")
	}
}
