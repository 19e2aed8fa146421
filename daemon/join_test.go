package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// controllerRig is one controller's machine of a test: its directory and
// its mesh, run until the test ends or stop.
type controllerRig struct {
	dir  string
	bus  string
	m    *Mesh
	stop func()
}

// runRig runs the mesh kept in dir on bus, its host's root in a temporary
// directory, until the test ends.
func runRig(t *testing.T, dir, bus string) *controllerRig {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})).With("dir", filepath.Base(dir))
	m, err := NewMesh(MeshConfig{
		Dir: dir, Addrs: spec.Addrs{Bus: bus, HTTP: "127.0.0.1:0"}, Advertise: []string{"nats://" + bus},
		Resolver: resolver.Config{Listen: []string{"127.0.0.1:0"}},
		Host:     host.Config{Root: t.TempDir(), HeartbeatEvery: time.Second},
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	r := &controllerRig{dir: dir, bus: bus, m: m}
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("mesh %s: %v", dir, err)
		}
	}
	t.Cleanup(r.stop)
	return r
}

// operatorCall calls verb on the controllers' bus at bus as the operator
// of the mesh kept in dir.
func operatorCall[Req, Res any](ctx context.Context, dir, bus string, v spec.Verb[Req, Res], req Req) (Res, error) {
	var res Res
	creds, err := statedir.ReadOperator(dir)
	if err != nil {
		return res, err
	}
	key, err := nkeys.FromSeed([]byte(creds.Seed))
	if err != nil {
		return res, err
	}
	root, err := ca.ParseCert([]byte(creds.CARoot))
	if err != nil {
		return res, err
	}
	pub, _ := key.PublicKey()
	nc, err := nats.Connect("nats://"+bus, nats.Nkey(pub, key.Sign), nats.Secure(ca.ClientTLS(root, spec.BusTLSName)),
		nats.TLSHandshakeFirst(), nats.CustomInboxPrefix(spec.OperatorInbox), nats.Timeout(5*time.Second), nats.NoReconnect())
	if err != nil {
		return res, err
	}
	defer nc.Close()
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, spec.APISubject(v.Name), body)
	if err != nil {
		return res, err
	}
	return res, spec.DecodeReply(msg.Data, &res)
}

// controllerToken is a controller's token for node, made by the
// controller on bus once it answers.
func controllerToken(t *testing.T, dir, bus, node string) spec.Token {
	t.Helper()
	var tok spec.Token
	poll.Until(t, 90*time.Second, "a controller's token for "+node, func() error {
		res, err := operatorCall(t.Context(), dir, bus, spec.TokenCreate, spec.TokenCreateRequest{Node: node, TTL: time.Hour, Controller: true})
		if err != nil {
			return err
		}
		tok, err = spec.ParseToken(res.Token)
		return err
	})
	return tok
}

// joinRig joins a controller to the mesh with tok, its bus and routes on
// ports of its own.
func joinRig(t *testing.T, tok spec.Token) (dir, bus, route string, err error) {
	dir = filepath.Join(t.TempDir(), "mesh")
	bus, route = testport.Addr(t, "127.0.0.1"), testport.Addr(t, "127.0.0.1")
	err = JoinController(t.Context(), ControllerJoin{
		Dir: dir, Token: tok, Address: "127.0.0.1", Addrs: spec.Addrs{Bus: bus, HTTP: "127.0.0.1:0", DNS: "127.0.0.1:0"},
		BusURL: "nats://" + bus, Cluster: route, Now: time.Now(),
	})
	return dir, bus, route, err
}

// genesisRig makes the mesh home of node alpha with --cluster and runs
// it: its directory, its bus, and the rig.
func genesisRig(t *testing.T) (dir, bus string, r *controllerRig) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "mesh")
	bus, route := testport.Addr(t, "127.0.0.1"), testport.Addr(t, "127.0.0.1")
	if err := Create(t.Context(), Genesis{Dir: dir, Mesh: "home", Node: "alpha", Address: "127.0.0.1", Bus: bus}); err != nil {
		t.Fatal(err)
	}
	if _, err := KeepClusterListen(dir, "home", route, "nats://"+bus); err != nil {
		t.Fatal(err)
	}
	return dir, bus, runRig(t, dir, bus)
}

// peersOf are the servers the cluster's state of dir holds.
func peersOf(t *testing.T, dir string) []string {
	t.Helper()
	st, err := ReadClusterState(dir)
	if err != nil || st == nil {
		t.Fatalf("cluster state of %s: %v", dir, err)
	}
	var names []string
	for _, p := range st.Peers {
		names = append(names, p.Server)
	}
	return names
}

// storesStream says whether the bus of the controller in dir keeps a
// copy of stream.
func storesStream(dir, stream string) bool {
	found := false
	filepath.WalkDir(filepath.Join(statedir.Controller(dir), mesh.JSDir), func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == stream && filepath.Base(filepath.Dir(path)) == "streams" {
			found = true
		}
		return nil
	})
	return found
}

// viewOf is what the store of the controller in dir answers of its
// tokens and nodes.
func viewOf(t *testing.T, dir string) (tokens []store.Token, nodes []string, err error) {
	path := filepath.Join(statedir.Controller(dir), mesh.DBFile)
	// Opening a missing store would make an empty one: the controller
	// would then find no store to rebuild.
	if _, err := os.Stat(path); err != nil {
		return nil, nil, err
	}
	db, err := store.Open(t.Context(), path)
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	if tokens, err = db.Tokens(t.Context()); err != nil {
		return nil, nil, err
	}
	ns, err := db.Nodes(t.Context())
	for _, n := range ns {
		nodes = append(nodes, n.Name+" "+n.NKey)
	}
	return tokens, nodes, err
}

// Three controllers formed by the real token and join path: a genesis
// run with --cluster, and two machines joined with a controller's token
// each. Every controller's view holds what is written through the one
// that runs the controller; the store's log is kept by all three; a
// joined controller's store deleted is rebuilt from the log with the same
// answers; a token used, or one pinned to another CA, joins nothing and
// changes no controller's peers.
func TestThreeControllersFormedByJoins(t *testing.T) {
	optin.NeedSlow(t, "three controllers on real clustered buses")
	dirA, busA, a := genesisRig(t)
	select {
	case <-a.m.Ready():
	case <-time.After(time.Minute):
		t.Fatal("the genesis controller was not ready within a minute")
	}
	// The genesis machine's resolver answers throughout the two joins,
	// each of which starts its mesh again in the grown peer set.
	stopAsking := askAll(t, a.m.Addrs().DNS)

	tokB := controllerToken(t, dirA, busA, "beta")
	dirB, busB, _, err := joinRig(t, tokB)
	if err != nil {
		t.Fatal(err)
	}
	b := runRig(t, dirB, busB)
	tokC := controllerToken(t, dirA, busA, "gamma")
	dirC, busC, _, err := joinRig(t, tokC)
	if err != nil {
		t.Fatal(err)
	}
	runRig(t, dirC, busC)
	for _, dir := range []string{dirA, dirB, dirC} {
		poll.Until(t, time.Minute, "three peers in "+dir, func() error {
			peers := peersOf(t, dir)
			if len(peers) == 3 {
				return nil
			}
			return errors.New(strings.Join(peers, ","))
		})
	}
	poll.Until(t, time.Minute, "the genesis controller runs in the peer set of three", func() error {
		_, err := operatorCall(t.Context(), dirA, busA, spec.TokenList, spec.TokenListRequest{})
		return err
	})
	asked, failed := stopAsking()
	if len(failed) > 0 {
		t.Errorf("%d of %d questions to the genesis machine's resolver went unanswered across the joins; the first: %s", len(failed), asked, failed[0])
	}

	// A write through the controller is in all three views.
	marker := controllerToken(t, dirA, busA, "delta")
	for _, dir := range []string{dirA, dirB, dirC} {
		poll.Until(t, time.Minute, "token "+marker.ID+" in the view of "+dir, func() error {
			tokens, _, err := viewOf(t, dir)
			if err != nil {
				return err
			}
			for _, tk := range tokens {
				if tk.ID == marker.ID && tk.Controller {
					return nil
				}
			}
			return errors.New("not there")
		})
	}
	// The store's log is kept by every server.
	for _, dir := range []string{dirA, dirB, dirC} {
		poll.Until(t, time.Minute, "the store's log kept by "+dir, func() error {
			if storesStream(dir, "KV_truth") {
				return nil
			}
			return errors.New("")
		})
	}

	// A joined controller's store, deleted, is rebuilt from the log.
	wantTokens, wantNodes, err := viewOf(t, dirA)
	if err != nil {
		t.Fatal(err)
	}
	b.stop()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(filepath.Join(statedir.Controller(dirB), mesh.DBFile+suffix))
	}
	runRig(t, dirB, busB)
	poll.Until(t, 2*time.Minute, "the rebuilt view of "+dirB, func() error {
		tokens, nodes, err := viewOf(t, dirB)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(tokens, wantTokens) || !reflect.DeepEqual(nodes, wantNodes) {
			return errors.New("it answers otherwise than the genesis controller's")
		}
		return nil
	})

	// A used token, and one pinned to another CA, join nothing.
	peers := peersOf(t, dirA)
	if _, _, _, err := joinRig(t, tokB); err == nil {
		t.Fatal("a used token joined a controller")
	}
	forged := tokC
	forged.Pin = "sha256:" + strings.Repeat("0", 64)
	dirF, _, _, err := joinRig(t, forged)
	if err == nil {
		t.Fatal("a token pinned to another CA joined a controller")
	}
	if _, err := os.Stat(filepath.Join(dirF, statedir.ControllerDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused join left %s/controller behind: %v", dirF, err)
	}
	if got := peersOf(t, dirA); !reflect.DeepEqual(got, peers) {
		t.Fatalf("a refused join changed the peers: %v, were %v", got, peers)
	}
}

// askAll asks the resolver at addr for a name every 20 ms until stop is
// called, which returns how many questions were asked and the ones that
// got no answer (any answer counts, NXDOMAIN included).
func askAll(t *testing.T, addr string) (stop func() (int, []string)) {
	t.Helper()
	quit := make(chan struct{})
	done := make(chan struct{})
	var asked int
	var failed []string
	go func() {
		defer close(done)
		c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			q := new(dns.Msg)
			q.SetQuestion("alpha.internal.", dns.TypeA)
			_, _, err := c.Exchange(q, addr)
			asked++
			if err != nil {
				failed = append(failed, err.Error())
			}
		}
	}()
	var once sync.Once
	stop = func() (int, []string) {
		once.Do(func() { close(quit); <-done })
		return asked, failed
	}
	t.Cleanup(func() { stop() })
	return stop
}
