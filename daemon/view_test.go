package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/lease"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// compactEntries is how many entries the log of withTinyCompactions
// holds before it compacts.
const compactEntries = 5

// withTinyCompactions runs a journal on the store of the mesh kept in dir,
// on the mesh's bus stopped, which compacts its log every few entries; it
// calls with with the journal's view and, once with returns, stops.
func withTinyCompactions(t *testing.T, dir string, with func(v *journal.View, js jetstream.JetStream)) {
	t.Helper()
	withJournal(t, dir, journal.Config{CompactEntries: compactEntries, CompactEvery: time.Nanosecond}, with)
}

// withJournal runs a journal configured by cfg on the store of the mesh
// kept in dir, on the mesh's bus stopped; it calls with with the
// journal's view and, once with returns, stops.
func withJournal(t *testing.T, dir string, cfg journal.Config, with func(v *journal.View, js jetstream.JetStream)) {
	t.Helper()
	ctx := t.Context()
	ctlDir := statedir.Controller(dir)
	auth, err := ca.Load(filepath.Join(ctlDir, mesh.CADir))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := auth.IssueServer(busNames(), []net.IP{net.IPv4(127, 0, 0, 1)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := key.PublicKey()
	bus, err := broker.New(broker.Config{
		Listen:   "127.0.0.1:0",
		StoreDir: filepath.Join(ctlDir, mesh.JSDir),
		TLS:      &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Users:    []broker.User{{NKey: pub, Full: true}},
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	bctx, stopBus := context.WithCancel(ctx)
	busDone := make(chan error, 1)
	go func() { busDone <- bus.Run(bctx) }()
	defer func() { stopBus(); <-busDone }()
	select {
	case <-bus.Ready():
	case err := <-busDone:
		t.Fatalf("the bus stopped: %v", err)
	}
	connect := busConnect(bus, key)
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer js.Conn().Close()

	db, err := store.OpenWith(ctx, filepath.Join(ctlDir, mesh.DBFile), store.Options{ViewOfLog: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	j := journal.New(cfg, quiet, db, connect)
	jctx, stopJournal := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- j.Run(jctx) }()
	defer func() { stopJournal(); <-done }()
	select {
	case <-j.Ready():
	case err := <-done:
		t.Fatalf("the journal stopped: %v", err)
	}
	with(j.Store(), js)
}

// auditVerbs are the verbs of the audit of the store at path.
func auditVerbs(t *testing.T, path string) []string {
	t.Helper()
	db, err := store.Open(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	entries, err := db.AuditSince(t.Context(), time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, e := range entries {
		verbs = append(verbs, e.Verb)
	}
	return verbs
}

// A controller's store put back from before its log's last compaction
// (the log's entries it has yet to apply compacted away) is removed, and
// the mesh runs with the store rebuilt from the log, holding every write.
func TestStoreBehindItsLogIsRebuilt(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "mesh")
	bus := testport.Addr(t, "127.0.0.1")
	if err := Create(t.Context(), Genesis{Dir: dir, Mesh: "home", Node: "alpha", Address: "127.0.0.1", Bus: bus}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(statedir.Controller(dir), mesh.DBFile)
	behind := filepath.Join(t.TempDir(), "behind.db")
	var want []string
	withTinyCompactions(t, dir, func(v *journal.View, js jetstream.JetStream) {
		audit := func(verb string) {
			t.Helper()
			if err := v.Audit(t.Context(), store.AuditEntry{At: time.Now(), Operator: "op", Verb: verb, Args: "{}", Outcome: "ok"}); err != nil {
				t.Fatal(err)
			}
			want = append(want, verb)
		}
		audit("before")
		if err := store.Snapshot(t.Context(), path, behind); err != nil {
			t.Fatal(err)
		}
		stream, err := js.Stream(t.Context(), "KV_"+journal.DefaultBucket)
		if err != nil {
			t.Fatal(err)
		}
		first := func() uint64 {
			msg, err := stream.GetMsg(t.Context(), 1, jetstream.WithGetMsgSubject(lease.Subject(journal.DefaultBucket, "w.>")))
			if err != nil {
				t.Fatal(err)
			}
			return msg.Sequence
		}
		began := first()
		// A compaction starts from an apply, one at a time: writes go on
		// until one has gone past the copy (a loaded machine runs fewer).
		n := 0
		poll.Until(t, 60*time.Second, "the log compacted past the store put back", func() error {
			for range compactEntries {
				audit(fmt.Sprint("after ", n))
				n++
			}
			at := first()
			if at > began+compactEntries {
				return nil
			}
			return fmt.Errorf("the log begins at %d, began at %d", at, began)
		})
	})
	if err := store.Restore(behind, path); err != nil {
		t.Fatal(err)
	}

	m, err := NewMesh(MeshConfig{
		Dir: dir, Addrs: spec.Addrs{Bus: bus, HTTP: "127.0.0.1:0"}, Advertise: []string{"nats://" + bus},
		Resolver: resolver.Config{Listen: []string{"127.0.0.1:0"}},
		Host:     host.Config{Root: t.TempDir(), HeartbeatEvery: time.Second},
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	select {
	case <-m.Ready():
	case err := <-done:
		t.Fatalf("the mesh with its store behind its log stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the mesh with its store behind its log not ready after a minute")
	}
	got := auditVerbs(t, path)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("the mesh stopped: %v", err)
	}
	for _, verb := range want {
		if !slices.Contains(got, verb) {
			t.Fatalf("the rebuilt store's audit %q lacks %q", got, verb)
		}
	}
}
