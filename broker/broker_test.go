package broker_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

type bus struct {
	srv  *broker.Server
	auth *ca.Authority
}

func startBus(t testing.TB, users []broker.User) *bus {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := auth.IssueServer([]string{"bus.mesh"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := broker.New(broker.Config{
		Listen:   "127.0.0.1:0",
		StoreDir: t.TempDir(),
		TLS:      &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Users:    users,
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("bus run: %v", err)
		}
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("bus stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("bus not ready after 30s")
	}
	return &bus{srv: srv, auth: auth}
}

func newUser(t testing.TB) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// tls is a client's TLS to the bus: verified against the mesh's root.
func (b *bus) tls() *tls.Config { return ca.ClientTLS(b.auth.Root(), "bus.mesh") }

// connect dials the bus over TCP, as a remote client would: TLS first,
// verified against the mesh's root.
func (b *bus) connect(t *testing.T, kp nkeys.KeyPair, opts ...nats.Option) (*nats.Conn, error) {
	t.Helper()
	pub, _ := kp.PublicKey()
	errs := make(chan error, 8)
	opts = append([]nats.Option{
		nats.Nkey(pub, kp.Sign),
		nats.Secure(b.tls()),
		nats.TLSHandshakeFirst(),
		// nats.go's default of 2 s for the dial and the handshake is
		// short for a loaded two-core machine running 8 packages at once.
		nats.Timeout(10 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }),
	}, opts...)
	nc, err := nats.Connect("nats://"+b.srv.Addr(), opts...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

// TestSetUsersKeepsJetStream holds the decision that the accounts are given
// as configuration text and the users by the gate: a user the gate admits
// uses JetStream in the mesh account, and after the users are replaced (as
// every enrolment does) it still stores and delivers.
func TestSetUsersKeepsJetStream(t *testing.T) {
	ctl, ctlPub := newUser(t)
	b := startBus(t, []broker.User{{NKey: ctlPub, Full: true}})
	nc, err := b.connect(t, ctl)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.before", []byte("before")); err != nil {
		t.Fatal(err)
	}

	_, pub2 := newUser(t)
	for i := range 3 {
		users := []broker.User{{NKey: ctlPub, Full: true}, {NKey: pub2, Publish: []string{"x.>"}}}
		if i%2 == 1 {
			users = users[:1]
		}
		if err := b.srv.SetUsers(users); err != nil {
			t.Fatalf("set users %d: %v", i, err)
		}
	}

	if _, err := js.Publish(ctx, "t.after", []byte("after")); err != nil {
		t.Fatalf("publish to JetStream after the users changed: %v", err)
	}
	cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("create consumer after the users changed: %v", err)
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		m.Ack()
	}
	if strings.Join(got, ",") != "before,after" {
		t.Fatalf("delivered: %q, want before,after", got)
	}
}

// TestPermissions: a restricted user may do only what its lists allow
// (subscribing or publishing elsewhere is a permissions violation), and
// SetUsers that adds a user puts it in force at once.
func TestPermissions(t *testing.T) {
	ctl, ctlPub := newUser(t)
	node, nodePub := newUser(t)
	b := startBus(t, []broker.User{{NKey: ctlPub, Full: true}})

	if _, err := b.connect(t, node); err == nil {
		t.Fatal("a user the bus does not know connected")
	}
	if err := b.srv.SetUsers([]broker.User{
		{NKey: ctlPub, Full: true},
		{NKey: nodePub, Publish: []string{"mine.>"}, Subscribe: []string{"_INBOX.n.>"}},
	}); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	nc, err := b.connect(t, node, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatalf("a user added by SetUsers cannot connect: %v", err)
	}
	ctlc, err := b.connect(t, ctl)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := ctlc.SubscribeSync("mine.x")
	if err != nil {
		t.Fatal(err)
	}
	ctlc.Flush()
	if err := nc.Publish("mine.x", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("allowed publish not delivered: %v", err)
	}
	if _, err := nc.SubscribeSync("other.>"); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("want a permission violation, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("subscribing to a subject not allowed raised no permission violation")
	}
	if _, err := ctlc.SubscribeSync("other.x"); err != nil {
		t.Fatal(err)
	}
	ctlc.Flush()
	if err := nc.Publish("other.x", []byte("no")); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), "Publish") {
			t.Fatalf("want a publish permission violation, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("publishing to a subject not allowed raised no permission violation")
	}
}

// TestBindFailureIsAnError: a port that is taken is an error naming the
// address, not a log line and a hang.
func TestBindFailureIsAnError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	auth, _ := ca.Create(t.TempDir(), "t", time.Now())
	cert, _ := auth.IssueServer([]string{"bus.mesh"}, nil, time.Hour)
	srv, err := broker.New(broker.Config{Listen: l.Addr().String(), StoreDir: t.TempDir(),
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("Run on a taken port: %v, want an error naming %s", err, l.Addr())
	}
}
