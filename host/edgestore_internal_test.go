package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// edgeBus is the embedded bus with the edges' bucket, as the controller
// makes it, and a user for each node: edges with their permissions beside
// their own, the others with their own only.
type edgeBus struct {
	bus   *broker.Server
	cfg   broker.Config
	addr  string // where it listens, the same across stop and run
	end   func() // stops the bus running
	auth  *ca.Authority
	full  *nats.Conn
	nodes map[string]nkeys.KeyPair
}

// startEdgeBus starts the bus with the bucket, its users nodes, each an
// edge when edges says so.
func startEdgeBus(t *testing.T, edges map[string]bool) *edgeBus {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "m", time.Now(), "internal", spec.BusTLSName)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := auth.IssueServer([]string{spec.BusTLSName}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctl, _ := nkeys.CreateUser()
	ctlPub, _ := ctl.PublicKey()
	b := &edgeBus{auth: auth, nodes: map[string]nkeys.KeyPair{}}
	users := []broker.User{{NKey: ctlPub, Full: true}}
	for node, edge := range edges {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		b.nodes[node] = kp
		p := spec.NodePermissions(node)
		if edge {
			e := spec.EdgePermissions()
			p.Publish, p.Subscribe = append(p.Publish, e.Publish...), append(p.Subscribe, e.Subscribe...)
		}
		users = append(users, broker.User{NKey: pub, Publish: p.Publish, Subscribe: p.Subscribe})
	}
	b.cfg = broker.Config{Listen: "127.0.0.1:0", StoreDir: t.TempDir(),
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, Users: users}
	b.run(t)
	b.full = b.connect(t, ctlPub, ctl, "")
	js, _ := jetstream.New(b.full)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: spec.EdgeBucket, History: 1, Storage: jetstream.FileStorage, Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	return b
}

// run starts the bus, on the address it had when it ran before, with
// what it stored then, until stop or the test's end.
func (b *edgeBus) run(t *testing.T) {
	t.Helper()
	if b.addr != "" {
		b.cfg.Listen = b.addr
	}
	bus, err := broker.New(b.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { bus.Run(ctx); close(done) }()
	b.end = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(b.end)
	select {
	case <-bus.Ready():
	case <-done:
		t.Fatal("the bus stopped before it was ready")
	}
	b.bus, b.addr = bus, bus.Addr()
}

// stop stops the bus, as the controller's going down does.
func (b *edgeBus) stop() { b.end() }

// connect connects as the user pub (kp), with the inbox of node when one
// is named, as a host does.
func (b *edgeBus) connect(t *testing.T, pub string, kp nkeys.KeyPair, node string, more ...nats.Option) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.Nkey(pub, kp.Sign),
		nats.Secure(ca.HeldTLS(b.auth.Root(), spec.BusTLSName, func() []*x509.Certificate { return []*x509.Certificate{b.auth.Intermediate()} })),
		nats.TLSHandshakeFirst(), nats.Timeout(10 * time.Second),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
	if node != "" {
		opts = append(opts, nats.CustomInboxPrefix(spec.NodeInbox(node)))
	}
	nc, err := nats.Connect("nats://"+b.addr, append(opts, more...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// node is a connection of node's host.
func (b *edgeBus) node(t *testing.T, node string, more ...nats.Option) *nats.Conn {
	t.Helper()
	kp := b.nodes[node]
	pub, _ := kp.PublicKey()
	return b.connect(t, pub, kp, node, more...)
}

// edgeKey is a new edge storage key.
func edgeKey(t *testing.T) []byte {
	k := make([]byte, spec.EdgeStorageKeySize)
	rand.Read(k)
	return k
}

// openStore is the edges' storage over a connection of node.
func (b *edgeBus) openStore(t *testing.T, node string, key []byte) *edgeStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := openEdgeStore(ctx, b.node(t, node), key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestEdgeStoreKeepsValuesSealed: the edges' storage keeps certmagic's
// values by their keys (wildcards, emails, dots and all) as certmagic's
// Storage says: Load what was stored, fs.ErrNotExist for what was not,
// List a directory (one level, or all of it), Stat, Exists, Delete of a
// directory with what is under it. The bucket holds each value sealed,
// never in the clear, and a value moved to another key does not open;
// another edge with the same key reads what one stored.
func TestEdgeStoreKeepsValuesSealed(t *testing.T) {
	t.Parallel()
	b := startEdgeBus(t, map[string]bool{"alpha": true, "beta": true})
	key := edgeKey(t)
	s, other := b.openStore(t, "alpha", key), b.openStore(t, "beta", key)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	values := map[string]string{
		"certificates/acme.example-dir/wildcard_.example.org/wildcard_.example.org.key": "PRIVATE KEY one",
		"certificates/acme.example-dir/a.example.org/a.example.org.crt":                 "CERT a",
		"certificates/acme.example-dir/a.example.org/a.example.org.json":                "{}",
		"acme/acme.example-dir/users/ops@example.org/ops.key":                           "ACCOUNT KEY",
		"acme/acme.example-dir/challenge_tokens/*.example.org.json":                     "token",
		"odd/=2E/a b+c": "escapes",
	}
	for k, v := range values {
		if err := s.Store(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range values {
		got, err := other.Load(ctx, k)
		if err != nil || string(got) != v {
			t.Errorf("load %s from the other edge: %q, %v; want %q", k, got, err, v)
		}
		e, err := b.kvOf(t).Get(ctx, bucketKey("v", k))
		if err != nil {
			t.Fatalf("the bucket's %s: %v", k, err)
		}
		if bytes.Contains(e.Value(), []byte(v)) {
			t.Errorf("the bucket holds %s in the clear", k)
		}
	}
	if _, err := s.Load(ctx, "certificates/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("load of a key never stored: %v, want fs.ErrNotExist", err)
	}

	// A value moved to another key does not open there.
	kv := b.kvOf(t)
	e, _ := kv.Get(ctx, bucketKey("v", "acme/acme.example-dir/users/ops@example.org/ops.key"))
	if _, err := kv.Put(ctx, bucketKey("v", "moved/ops.key"), e.Value()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "moved/ops.key"); err == nil {
		t.Error("a sealed value moved to another key opened there")
	}
	// Another key does not open what this one sealed.
	if _, err := b.openStore(t, "beta", edgeKey(t)).Load(ctx, "certificates/acme.example-dir/a.example.org/a.example.org.crt"); err == nil {
		t.Error("a value opened under another edge storage key")
	}

	list := func(path string, recursive bool, want ...string) {
		t.Helper()
		got, err := s.List(ctx, path, recursive)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("list %q recursive %v: %q, %v; want %q", path, recursive, got, err, want)
		}
	}
	list("certificates", false, "certificates/acme.example-dir")
	list("certificates/acme.example-dir", false, "certificates/acme.example-dir/a.example.org", "certificates/acme.example-dir/wildcard_.example.org")
	list("certificates/acme.example-dir/a.example.org", true,
		"certificates/acme.example-dir/a.example.org/a.example.org.crt", "certificates/acme.example-dir/a.example.org/a.example.org.json")
	list("acme/acme.example-dir/challenge_tokens", false, "acme/acme.example-dir/challenge_tokens/*.example.org.json")
	if _, err := s.List(ctx, "certificates/acme", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("list of a prefix that is no component: %v, want fs.ErrNotExist", err)
	}

	crt := "certificates/acme.example-dir/a.example.org/a.example.org.crt"
	if info, err := s.Stat(ctx, crt); err != nil || !info.IsTerminal || info.Size != int64(len(values[crt])) || time.Since(info.Modified) > time.Minute {
		t.Errorf("stat of a value: %+v, %v", info, err)
	}
	if info, err := s.Stat(ctx, "certificates/acme.example-dir"); err != nil || info.IsTerminal {
		t.Errorf("stat of a directory: %+v, %v", info, err)
	}
	if _, err := s.Stat(ctx, "certificates/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat of nothing: %v, want fs.ErrNotExist", err)
	}
	if !s.Exists(ctx, crt) || !s.Exists(ctx, "certificates") || s.Exists(ctx, "certificates/none") || s.Exists(ctx, "cert") {
		t.Error("exists says otherwise than what is stored")
	}

	if err := s.Delete(ctx, "certificates/acme.example-dir/a.example.org"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "certificates/none"); err != nil {
		t.Errorf("delete of nothing: %v", err)
	}
	if s.Exists(ctx, crt) {
		t.Error("a value under a directory deleted is still there")
	}
	list("certificates/acme.example-dir", false, "certificates/acme.example-dir/wildcard_.example.org")
}

// kvOf is the bucket as the controller's connection sees it.
func (b *edgeBus) kvOf(t *testing.T) jetstream.KeyValue {
	t.Helper()
	js, _ := jetstream.New(b.full)
	kv, err := js.KeyValue(context.Background(), spec.EdgeBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestEdgeStoreLocks: of two edges locking one name at once, one holds it
// and the other waits until it is released, then holds it; a lock held
// longer than its lifetime is renewed, so it is not taken over; a wait
// ends with its context; a lock left by a holder gone is taken over once
// stale.
func TestEdgeStoreLocks(t *testing.T) {
	t.Parallel()
	b := startEdgeBus(t, map[string]bool{"alpha": true, "beta": true})
	key := edgeKey(t)
	one, two := b.openStore(t, "alpha", key), b.openStore(t, "beta", key)
	for _, s := range []*edgeStore{one, two} {
		s.ttl, s.poll = 2*time.Second, 50*time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "issue_cert_*.example.org"

	got := make(chan string, 2)
	for _, s := range []struct {
		name string
		s    *edgeStore
	}{{"one", one}, {"two", two}} {
		go func() {
			if err := s.s.Lock(ctx, name); err != nil {
				t.Error(err)
				got <- ""
				return
			}
			got <- s.name
		}()
	}
	first := <-got
	// Renewed four times (past its lifetime), the lock still holds.
	kv := b.kvOf(t)
	e, err := kv.Get(ctx, bucketKey("l", name))
	if err != nil {
		t.Fatal(err)
	}
	taken := e.Revision()
	poll.Until(t, 20*time.Second, "the lock renewed four times", func() error {
		e, err := kv.Get(ctx, bucketKey("l", name))
		if err != nil {
			return err
		}
		if e.Revision() >= taken+4 {
			return nil
		}
		return fmt.Errorf("revision %d, taken at %d", e.Revision(), taken)
	})
	select {
	case second := <-got:
		t.Fatalf("both %s and %s hold the lock", first, second)
	default:
	}
	holder, waiter := one, two
	if first == "two" {
		holder, waiter = two, one
	}
	if err := holder.Unlock(ctx, name); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == first || second == "" {
		t.Fatalf("the lock went to %q after %s released it", second, first)
	}

	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	if err := holder.Lock(short, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a lock held by another, its wait's context ended: %v, want the deadline", err)
	}
	if err := waiter.Unlock(ctx, name); err != nil {
		t.Fatal(err)
	}

	// A holder gone leaves its lock, which expires.
	left, _ := json.Marshal(edgeLockValue{Owner: "gone", Expires: time.Now().Add(-time.Second)})
	if _, err := b.kvOf(t).Put(ctx, bucketKey("l", "stale"), left); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := one.Lock(ctx, "stale"); err != nil {
		t.Fatalf("a stale lock: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a stale lock taken over after %s", d)
	}
	if err := one.Unlock(ctx, "stale"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, bucketKey("l", "stale")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a lock released: %v, want it gone", err)
	}
}

// TestEdgeBucketDeniedToOtherNodes: through the real bus, an edge node's
// credential puts, gets and lists in the edges' bucket; another node's
// is denied each (a permissions violation), both at the bucket's API and
// at its subjects.
func TestEdgeBucketDeniedToOtherNodes(t *testing.T) {
	t.Parallel()
	b := startEdgeBus(t, map[string]bool{"alpha": true, "gamma": false})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, _ := jetstream.New(b.node(t, "alpha"))
	kv, err := js.KeyValue(ctx, spec.EdgeBucket)
	if err != nil {
		t.Fatalf("the edge opens the bucket: %v", err)
	}
	if _, err := kv.Put(ctx, "v.x", []byte("sealed")); err != nil {
		t.Fatalf("the edge puts: %v", err)
	}
	if e, err := kv.Get(ctx, "v.x"); err != nil || string(e.Value()) != "sealed" {
		t.Fatalf("the edge gets: %v", err)
	}
	if keys, err := kv.Keys(ctx); err != nil || !slices.Equal(keys, []string{"v.x"}) {
		t.Fatalf("the edge lists: %q, %v", keys, err)
	}

	denied := make(chan error, 16)
	nc := b.node(t, "gamma", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case denied <- err:
		default:
		}
	}))
	violation := func(what string) {
		t.Helper()
		select {
		case err := <-denied:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("%s: the bus says %v, want a permissions violation", what, err)
			}
		case <-ctx.Done():
			t.Fatalf("%s: the bus reported no permissions violation", what)
		}
	}
	// A denied request gets no answer: each waits out this much.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 500*time.Millisecond) }
	ojs, _ := jetstream.New(nc)
	c, stop := short()
	if _, err := ojs.KeyValue(c, spec.EdgeBucket); err == nil {
		t.Error("another node opened the edges' bucket")
	}
	stop()
	violation("another node opens the bucket")
	c, stop = short()
	if _, err := ojs.Publish(c, "$KV."+spec.EdgeBucket+".v.x", []byte("forged")); err == nil {
		t.Error("another node put in the edges' bucket")
	}
	stop()
	violation("another node puts")
	c, stop = short()
	if _, err := nc.RequestWithContext(c, "$JS.API.DIRECT.GET.KV_"+spec.EdgeBucket+".$KV."+spec.EdgeBucket+".v.x", nil); err == nil {
		t.Error("another node got from the edges' bucket")
	}
	stop()
	violation("another node gets")
	if e, err := kv.Get(ctx, "v.x"); err != nil || string(e.Value()) != "sealed" {
		t.Errorf("the value after another node's tries: %v", err)
	}
}

// TestEdgeLockRenewalCutShortStaysHeld: a renewal written whose answer
// never came (here: the lock rewritten under its owner behind the
// holder's back) leaves the holder a stale revision; the next renewal
// finds the lock still its own and goes on holding it.
func TestEdgeLockRenewalCutShortStaysHeld(t *testing.T) {
	t.Parallel()
	b := startEdgeBus(t, map[string]bool{"alpha": true, "beta": true})
	key := edgeKey(t)
	one, two := b.openStore(t, "alpha", key), b.openStore(t, "beta", key)
	for _, s := range []*edgeStore{one, two} {
		s.ttl, s.poll = time.Second, 50*time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "issue_cert_cut.example.org"
	if err := one.Lock(ctx, name); err != nil {
		t.Fatal(err)
	}
	kv := b.kvOf(t)
	written, err := kv.Put(ctx, bucketKey("l", name), one.lockValue())
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the lock renewed past the write it did not see", func() error {
		e, err := kv.Get(ctx, bucketKey("l", name))
		if err != nil {
			return err
		}
		if e.Revision() >= written+3 {
			return nil
		}
		return fmt.Errorf("revision %d, written behind its back at %d", e.Revision(), written)
	})
	short, stop := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer stop()
	if err := two.Lock(short, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("another took the lock its holder still renews: %v", err)
	}
	if err := one.Unlock(ctx, name); err != nil {
		t.Fatal(err)
	}
}
