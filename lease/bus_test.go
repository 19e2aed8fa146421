package lease_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/lease"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// ttl is the tests' lease TTL: renewals every second.
const ttl = 3 * time.Second

// bucketName is the tests' bucket, and leaseKey its lease key.
const (
	bucketName = "truth"
	leaseKey   = "leader"
)

// testBus is n buses on loopback, routed as one cluster when n > 1, with
// the controller's user.
type testBus struct {
	auth  *ca.Authority
	ctl   nkeys.KeyPair
	srvs  []*broker.Server
	stops []func()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startBus starts n servers, and waits until each routes to every other.
func startBus(t *testing.T, n int) *testBus {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	ctlPub, _ := ctl.PublicKey()
	routes := make([]string, n)
	for i := range routes {
		routes[i] = testport.Addr(t, "127.0.0.1")
	}
	b := &testBus{auth: auth, ctl: ctl}
	for i := range n {
		cert, err := auth.IssueServer([]string{"mesh-bus"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg := broker.Config{
			Listen:   "127.0.0.1:0",
			StoreDir: t.TempDir(),
			TLS:      &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			Users:    []broker.User{{NKey: ctlPub, Full: true}},
		}
		if n > 1 {
			cfg.Cluster = &broker.Cluster{
				Name: "mesh", ServerName: fmt.Sprintf("c%d", i), Listen: routes[i], Peers: routes,
				Cert: cert, Root: auth.Root(), TLSName: "mesh-bus", User: "route", Password: "secret",
			}
		}
		srv, err := broker.New(cfg, quiet())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		var once sync.Once
		stop := func() {
			once.Do(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("bus %d: %v", i, err)
				}
			})
		}
		t.Cleanup(stop)
		select {
		case <-srv.Ready():
		case err := <-done:
			t.Fatalf("bus %d stopped before ready: %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("bus %d not ready after 30s", i)
		}
		b.srvs = append(b.srvs, srv)
		b.stops = append(b.stops, stop)
	}
	for i, srv := range b.srvs {
		poll.Until(t, 30*time.Second, fmt.Sprintf("bus %d routes to every other", i), func() error {
			if len(srv.Peers()) == n-1 {
				return nil
			}
			return fmt.Errorf("routes to %q", srv.Peers())
		})
	}
	return b
}

// js is JetStream through server i alone: when it stops, requests fail.
func (b *testBus) js(t *testing.T, i int) jetstream.JetStream {
	t.Helper()
	pub, _ := b.ctl.PublicKey()
	nc, err := nats.Connect("nats://"+b.srvs[i].Addr(),
		nats.Nkey(pub, b.ctl.Sign),
		nats.Secure(ca.ClientTLS(b.auth.Root(), "mesh-bus")),
		nats.TLSHandshakeFirst(),
		nats.Timeout(10*time.Second),
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

// bucket makes the lease's bucket through js with replicas.
func bucket(t *testing.T, js jetstream.JetStream, replicas int) jetstream.KeyValue {
	t.Helper()
	var kv jetstream.KeyValue
	poll.Until(t, 60*time.Second, "the bucket is made", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		kv, err = lease.Bucket(ctx, js, jetstream.KeyValueConfig{Bucket: bucketName, Replicas: replicas})
		return err
	})
	return kv
}

// campaigner is a campaign running, and how to stop it.
type campaigner struct {
	*lease.Campaign
	name  string
	pause *pauser
	stop  func()
}

// campaign starts a campaign named name through js, its clock now (nil:
// time.Now).
func campaign(t *testing.T, js jetstream.JetStream, name string, now func() time.Time) *campaigner {
	t.Helper()
	p := &pauser{}
	c, err := lease.New(lease.Config{Bucket: bucketName, Key: leaseKey, Name: name, TTL: ttl}, quiet(),
		lease.Deps{JS: js, Now: now, Pause: p.wait})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			p.resume()
			cancel()
			if err := <-done; err != nil {
				t.Errorf("campaign %s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return &campaigner{Campaign: c, name: name, pause: p, stop: stop}
}

func (c *campaigner) state() lease.State {
	st, _ := c.Leader()
	return st
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

// wait is the campaign's Pause: it returns at once unless paused.
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

// held reports whether the campaign is held in wait.
func (p *pauser) isHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}

// leading is the campaigners leading now, by name.
func leading(cs []*campaigner) []string {
	var names []string
	for _, c := range cs {
		if c != nil && c.state().Leading {
			names = append(names, c.name)
		}
	}
	return names
}

// waitLeader waits until exactly one of cs leads and returns its index,
// failing t if two ever lead at once.
func waitLeader(t *testing.T, within time.Duration, what string, cs []*campaigner, not ...int) int {
	t.Helper()
	found := -1
	poll.Until(t, within, what, func() error {
		names := leading(cs)
		if len(names) > 1 {
			t.Fatalf("%s: two campaigners lead at once: %q", what, names)
		}
		for i, c := range cs {
			if c != nil && c.state().Leading && !contains(not, i) {
				found = i
				return nil
			}
		}
		return fmt.Errorf("leading: %q", names)
	})
	return found
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
