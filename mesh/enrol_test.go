package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nkeys"
)

// clock is a settable clock for the controller under test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newController runs a controller on a real bus, store and CA.
func newController(t testing.TB, clk *clock) (*Controller, *store.DB) {
	return newControllerWith(t, clk, nil)
}

// newControllerWith runs a controller whose store is wrap(db) when wrap is
// given: the seam where a test makes a read fail.
func newControllerWith(t testing.TB, clk *clock, wrap func(*store.DB) Store) (*Controller, *store.DB) {
	t.Helper()
	return newControllerCfg(t, clk, wrap, func(*Config) {})
}

// newControllerCfg is newControllerWith with the controller's config as
// tune leaves it.
func newControllerCfg(t testing.TB, clk *clock, wrap func(*store.DB) Store, tune func(*Config)) (*Controller, *store.DB) {
	t.Helper()
	return newControllerOpts(t, clk, wrap, tune, store.Options{})
}

// newControllerOpts is newControllerCfg with its store opened with opts.
func newControllerOpts(t testing.TB, clk *clock, wrap func(*store.DB) Store, tune func(*Config), opts store.Options) (*Controller, *store.DB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	g, err := Create(ctx, GenesisConfig{Dir: filepath.Join(dir, "controller"), Mesh: "m", Node: "alpha", Address: "127.0.0.1", SealKey: alphaSealKey.Public().String(), WGKey: newWGKey(), Now: clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	_ = g
	db, err := store.OpenWith(ctx, filepath.Join(dir, "controller", DBFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	auth, err := ca.Load(filepath.Join(dir, "controller", CADir))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := auth.IssueServer([]string{spec.BusTLSName}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := NewKeys()
	if err != nil {
		t.Fatal(err)
	}
	users, err := Users(ctx, db, keys, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	bus, err := broker.New(broker.Config{Listen: "127.0.0.1:0", StoreDir: filepath.Join(dir, "js"),
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, Users: users}, log)
	if err != nil {
		t.Fatal(err)
	}
	_, sign, _ := ed25519.GenerateKey(rand.Reader)
	sealKey, _, err := LoadSealKey(ctx, filepath.Join(dir, "controller"), db)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{HTTPListen: "127.0.0.1:0", Keys: keys, BusURLs: []string{"nats://x"}, SignKey: sign, SealKey: sealKey, Now: clk.Now}
	tune(&cfg)
	c, err := New(cfg, log, Deps{DB: seam(db, wrap), CA: auth, Bus: bus})
	if err != nil {
		t.Fatal(err)
	}
	controllerDirs.Store(c, filepath.Join(dir, "controller"))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); bus.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	runController(t, ctx, c)
	return c, db
}

// alphaSealKey is the sealing key of every test controller's own node,
// alpha: what is sealed to alpha, a test opens with it.
var alphaSealKey = func() *seal.NodeKey {
	k, err := seal.GenerateNodeKey()
	if err != nil {
		panic(err)
	}
	return k
}()

// controllerDirs are the directories (D/controller) of the controllers
// newControllerCfg makes, by the controller: mesh.db and seal.key.
var controllerDirs sync.Map

// controllerStops stop each controller a test runs (runController), by
// the controller: restartController stops one and runs another in its place.
var controllerStops sync.Map

// runController runs c under ctx until the test ends or restartController
// stops it, and waits until it is ready.
func runController(t testing.TB, ctx context.Context, c *Controller) {
	t.Helper()
	cctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(cctx) }()
	stopWait := func() { stop(); <-done }
	controllerStops.Store(c, stopWait)
	t.Cleanup(stopWait)
	select {
	case <-c.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("controller not ready")
	}
}

// restartController stops c, as a controller's process ends, and runs a
// new controller of the same config on the same store, CA and bus.
func restartController(t testing.TB, c *Controller) *Controller {
	t.Helper()
	stop, ok := controllerStops.Load(c)
	if !ok {
		t.Fatal("the controller was not run by runController")
	}
	stop.(func())()
	again, err := New(c.cfg, c.log, c.deps)
	if err != nil {
		t.Fatal(err)
	}
	runController(t, context.Background(), again)
	return again
}

func seam(db *store.DB, wrap func(*store.DB) Store) Store {
	if wrap == nil {
		return db
	}
	return wrap(db)
}

func enrolRequest(t testing.TB, tok spec.Token, node string) []byte {
	t.Helper()
	nodeKey, _ := nkeys.CreateUser()
	return enrolRequestWith(t, tok, node, nodeKey)
}

// enrolRequestWith is an enrolment request for node, with nodeKey's public
// half, signed by tok's secret.
func enrolRequestWith(t testing.TB, tok spec.Token, node string, nodeKey nkeys.KeyPair) []byte {
	t.Helper()
	nodePub, _ := nodeKey.PublicKey()
	sealKey, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	return enrolRequestSealed(t, tok, spec.EnrolRequest{Protocol: spec.Protocol, TokenID: tok.ID, Node: node, NKey: nodePub,
		SealKey: sealKey.Public().String(), WGKey: newWGKey(), Address: "127.0.0.2"})
}

// enrolRequestSealed is req signed by tok's secret.
func enrolRequestSealed(t testing.TB, tok spec.Token, req spec.EnrolRequest) []byte {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(tok.Secret))
	if err != nil {
		t.Fatal(err)
	}
	req.Proof, _ = kp.Sign(req.ProofBytes())
	return mustJSON(t, req)
}

// TestTokenExpiry: a token past its expiry is refused by the
// controller by name, and its enrolment user leaves the bus.
func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "beta", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := spec.ParseToken(res.Token)
	if err != nil {
		t.Fatal(err)
	}
	enrolUser := func() bool {
		kp, _ := nkeys.FromSeed([]byte(tok.Secret))
		pub, _ := kp.PublicKey()
		for _, u := range c.enrolment.users {
			if u.NKey == pub {
				return true
			}
		}
		return false
	}
	if !enrolUser() {
		t.Fatal("the token's enrolment user is not on the bus after create returned")
	}

	clk.Add(2 * time.Minute)
	_, err = c.enrolment.enrol(ctx, enrolRequest(t, tok, "beta"))
	if err == nil || !strings.Contains(err.Error(), "expired at") {
		t.Fatalf("enrol with an expired token: %v", err)
	}
	if nodes, _ := db.Nodes(ctx); len(nodes) != 1 {
		t.Fatalf("an expired token added a node: %d nodes", len(nodes))
	}
	if err := c.enrolment.syncUsers(ctx); err != nil {
		t.Fatal(err)
	}
	if enrolUser() {
		t.Fatal("an expired token's enrolment user is still on the bus after a sweep")
	}
}

// TestEnrolRefusals: a request bound to another token's secret, for another
// node, or with a node key that is not a user key, adds nothing.
func TestEnrolRefusals(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	mk := func(node string) spec.Token {
		res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: node})
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := spec.ParseToken(res.Token)
		return tok
	}
	a, b := mk("beta"), mk("gamma")
	swapped := a
	swapped.Secret = b.Secret
	cases := []struct {
		name string
		body []byte
		want string
	}{
		{"signed by another token's secret", enrolRequest(t, swapped, "beta"), "not signed by its secret"},
		{"for another node", enrolRequest(t, a, "delta"), `is for node "beta", not "delta"`},
		{"unknown token", enrolRequest(t, spec.Token{ID: "tnope", Secret: a.Secret}, "beta"), "not one this mesh made"},
		{"malformed", []byte(`{"token_id": 1}`), "malformed enrolment request"},
		{"unknown field", []byte(`{"token_id": "x", "extra": true}`), "malformed enrolment request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.enrolment.enrol(ctx, tc.body)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if nodes, _ := db.Nodes(ctx); len(nodes) != 1 {
				t.Fatalf("a refused enrolment added a node")
			}
		})
	}
	// And the real one goes through, once.
	if _, err := c.enrolment.enrol(ctx, enrolRequest(t, a, "beta")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.enrolment.enrol(ctx, enrolRequest(t, a, "beta")); err == nil || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("second use: %v", err)
	}
}

// TestUsersIsNeverEmptyOnFailure holds invariant 1 for the bus's users: a
// store that cannot be read is an error, never a list without the nodes
// (which would lock every node out at the next change of the users).
func TestUsersIsNeverEmptyOnFailure(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	before := len(c.enrolment.users)
	if before != 4 { // the controller's two, the operator, alpha
		t.Fatalf("the controller starts with %d bus users, want 4", before)
	}
	db.Close()
	users, err := Users(context.Background(), db, c.cfg.Keys, clk.Now())
	if err == nil || users != nil {
		t.Fatalf("Users on a closed store: %d users, err %v", len(users), err)
	}
	if err := c.enrolment.syncUsers(context.Background()); err == nil {
		t.Fatal("syncUsers on a closed store succeeded")
	}
	if len(c.enrolment.users) != before {
		t.Fatalf("a failed sync changed the bus's users from %d to %d", before, len(c.enrolment.users))
	}
}

// TestUsersChangedOneAtATimeAreTheComposedOnes: token create, join, a
// refused join, revoke and node remove each change one bus user (addUser,
// withdrawUser), not every user composed from the store; after each, the
// bus holds exactly the users composing them all (Users, syncUsers) gives.
// A step that changed the wrong user, or none, differs.
func TestUsersChangedOneAtATimeAreTheComposedOnes(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	tokens := map[string]spec.Token{}
	create := func(node string) {
		res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: node})
		if err != nil {
			t.Fatal(err)
		}
		tokens[node], _ = spec.ParseToken(res.Token)
	}
	for _, step := range []struct {
		name string
		do   func()
	}{
		{"tokens for beta, gamma and delta", func() { create("beta"); create("gamma"); create("delta") }},
		{"beta joins", func() {
			if _, err := c.enrolment.enrol(ctx, enrolRequest(t, tokens["beta"], "beta")); err != nil {
				t.Fatal(err)
			}
		}},
		{"beta's token again: refused, nothing changes", func() {
			if _, err := c.enrolment.enrol(ctx, enrolRequest(t, tokens["beta"], "beta")); err == nil {
				t.Fatal("a used token joined again")
			}
		}},
		{"delta's token for another name: refused, the token stays open", func() {
			if _, err := c.enrolment.enrol(ctx, enrolRequest(t, tokens["delta"], "zeta")); err == nil {
				t.Fatal("a token joined another node than its own")
			}
		}},
		{"gamma's token revoked", func() {
			if _, err := c.enrolment.revokeToken(ctx, spec.TokenRevokeRequest{ID: tokens["gamma"].ID}); err != nil {
				t.Fatal(err)
			}
		}},
		{"delta joins", func() {
			if _, err := c.enrolment.enrol(ctx, enrolRequest(t, tokens["delta"], "delta")); err != nil {
				t.Fatal(err)
			}
		}},
		{"beta removed", func() {
			if _, err := c.enrolment.removeNode(ctx, spec.NodeRemoveRequest{Name: "beta"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"beta joins again", func() { create("beta"); joinNodeWith(t, c, tokens["beta"], "beta") }},
	} {
		step.do()
		composed, err := Users(ctx, db, c.cfg.Keys, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		want := byKey(composed)
		got := byKey(c.deps.Bus.Users())
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after %s the bus holds %d users, composing them gives %d:\nbus: %+v\ncomposed: %+v", step.name, len(got), len(want), got, want)
		}
		if !reflect.DeepEqual(c.enrolment.users, want) {
			t.Fatalf("after %s the controller's record of the bus's users is not what the bus holds", step.name)
		}
	}
}

// joinNodeWith enrols node with tok, as a host does.
func joinNodeWith(t *testing.T, c *Controller, tok spec.Token, node string) {
	t.Helper()
	if _, err := c.enrolment.enrol(context.Background(), enrolRequest(t, tok, node)); err != nil {
		t.Fatal(err)
	}
}
