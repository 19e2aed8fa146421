package host_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// withControllers is roster message seq with the controllers' bus URLs
// urls.
func withControllers(seq uint64, urls ...string) spec.RosterDoc {
	d := rosterDoc(seq, "10.1.0.1")
	d.Names.Controllers = urls
	return d
}

// keptBus is the bus addresses the host's state.json holds.
func keptBus(t *testing.T, dir string) []string {
	t.Helper()
	st, _, err := host.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st.Bus
}

// TestHostKeepsItsBusFromAHostileRoster: a roster whose controllers' bus
// URLs a host must not take (too many, another scheme, more than a host
// and a port, an empty one) is held for its names, and the host keeps
// the bus addresses it has; so does a roster that carries none. A sound
// list is then taken and kept in state.json.
func TestHostKeepsItsBusFromAHostileRoster(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start()
	was := keptBus(t, b.hostDir)
	many := make([]string, spec.MaxControllers+1)
	for i := range many {
		many[i] = fmt.Sprintf("nats://192.0.2.%d:4222", i+1)
	}
	seq := uint64(0)
	for _, bad := range [][]string{
		many,
		{"http://192.0.2.1:4222"},
		{"nats://user:secret@192.0.2.1:4222"},
		{"nats://192.0.2.1:4222", ""},
		{"nats://" + strings.Repeat("a", spec.MaxBusURL) + ":4222"},
		nil,
	} {
		seq++
		b.answered(b.publishRoster(encodeRoster(t, withControllers(seq, bad...)), nil))
		if got := host.RosterSeqOf(b.agent.Load()); got != seq {
			t.Fatalf("roster %d not held (holds %d): its names are sound", seq, got)
		}
		if got := keptBus(t, b.hostDir); !slices.Equal(got, was) {
			t.Fatalf("roster %d with controllers %.80q: the host keeps bus %q, want %q", seq, bad, got, was)
		}
	}
	seq++
	sound := append(slices.Clone(was), "nats://192.0.2.9:4222")
	b.answered(b.publishRoster(encodeRoster(t, withControllers(seq, sound...)), nil))
	if got := keptBus(t, b.hostDir); !slices.Equal(got, sound) {
		t.Fatalf("the host keeps bus %q, want the roster's %q", got, sound)
	}
}

// TestHostReconnectsToAnotherController: a host that joined when the mesh
// had one controller's bus takes the controllers' bus URLs a roster
// carries, keeps them in state.json and hands them to its connection:
// when the bus it is on stops, it reconnects to the other and is heard
// there.
func TestHostReconnectsToAnotherController(t *testing.T) {
	t.Parallel()
	auth, err := ca.Create(t.TempDir(), "m", time.Now(), "internal", spec.BusTLSName)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := auth.IssueServer([]string{spec.BusTLSName}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	held := ca.HeldTLS(auth.Root(), spec.BusTLSName, func() []*x509.Certificate { return []*x509.Certificate{auth.Intermediate()} })
	ctl, _ := nkeys.CreateUser()
	ctlPub, _ := ctl.PublicKey()
	node, _ := nkeys.CreateUser()
	nodePub, _ := node.PublicKey()
	nodeSeed, _ := node.Seed()
	p := spec.NodePermissions("alpha")
	users := []broker.User{{NKey: ctlPub, Full: true}, {NKey: nodePub, Publish: p.Publish, Subscribe: p.Subscribe}}
	log := slog.New(slog.DiscardHandler)
	type bus struct {
		srv  *broker.Server
		stop func()
		url  string
	}
	run := func() bus {
		srv, err := broker.New(broker.Config{Listen: "127.0.0.1:0", StoreDir: t.TempDir(),
			TLS: &tls.Config{Certificates: []tls.Certificate{cert}}, Users: users}, log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { srv.Run(ctx); close(done) }()
		<-srv.Ready()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		return bus{srv: srv, stop: stop, url: "nats://" + srv.Addr()}
	}
	first, second := run(), run()
	dial := func(b bus) *nats.Conn {
		nc, err := nats.Connect(b.url, nats.Nkey(ctlPub, ctl.Sign), nats.Secure(held), nats.TLSHandshakeFirst(), nats.Timeout(10*time.Second), nats.NoReconnect())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := context.Background()
	js, _ := jetstream.New(dial(first))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: spec.DeclarationStream, Subjects: []string{spec.RosterSubject},
		RePublish: &jetstream.RePublish{Source: ">", Destination: spec.Republished(">")}}); err != nil {
		t.Fatal(err)
	}
	// The second bus hears the host's heartbeats.
	beats, err := dial(second).SubscribeSync(spec.NodeSubject("alpha", spec.KindHeartbeat))
	if err != nil {
		t.Fatal(err)
	}

	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	if err := host.Init(dir, host.State{Mesh: "m", Node: "alpha", Bus: []string{first.url},
		CAPin: auth.Pin(), CARoot: string(auth.RootsPEM()), SignKey: base64.StdEncoding.EncodeToString(pub)}, nodeSeed); err != nil {
		t.Fatal(err)
	}
	agent, err := host.New(host.Config{Dir: dir, Root: t.TempDir(), HeartbeatEvery: time.Hour, ReconcileEvery: time.Hour}, log)
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { agent.Run(actx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-agent.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the host was not ready within 30s")
	}

	both := []string{first.url, second.url}
	raw := encodeRoster(t, withControllers(1, both...))
	m := nats.NewMsg(spec.RosterSubject)
	m.Data = raw
	m.Header.Set(spec.SigHeader, base64.StdEncoding.EncodeToString(ed25519.Sign(key, raw)))
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "the host keeps both buses", func() error {
		got := keptBus(t, dir)
		if slices.Equal(got, both) {
			return nil
		}
		return fmt.Errorf("it keeps %q", got)
	})

	first.stop()
	if _, err := beats.NextMsg(30 * time.Second); err != nil {
		t.Fatalf("no heartbeat on the second bus within 30s of the first stopping: %v", err)
	}
}
