package journal_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startBus starts a bus keeping JetStream in dir, and returns how to reach
// it in process.
func startBus(t testing.TB, dir string) func(context.Context) (jetstream.JetStream, error) {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := auth.IssueServer([]string{"mesh-bus"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := nkeys.CreateUser()
	pub, _ := key.PublicKey()
	srv, err := broker.New(broker.Config{Listen: "127.0.0.1:0", StoreDir: dir,
		TLS:   &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Users: []broker.User{{NKey: pub, Full: true}}}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("bus stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("bus not ready after 30s")
	}
	return func(context.Context) (jetstream.JetStream, error) {
		nc, err := nats.Connect("", nats.InProcessServer(srv.NATS()), nats.Nkey(pub, key.Sign))
		if err != nil {
			return nil, err
		}
		t.Cleanup(nc.Close)
		return jetstream.New(nc)
	}
}

// running is a journal run on the store at path, and how to stop it.
func running(t testing.TB, path string, connect func(context.Context) (jetstream.JetStream, error)) (*journal.View, func()) {
	t.Helper()
	return runningWith(t, path, connect, journal.Config{})
}

// runningWith is running, the journal configured by cfg.
func runningWith(t testing.TB, path string, connect func(context.Context) (jetstream.JetStream, error), cfg journal.Config) (*journal.View, func()) {
	t.Helper()
	db, err := store.OpenWith(context.Background(), path, store.Options{ViewOfLog: true})
	if err != nil {
		t.Fatal(err)
	}
	j := journal.New(cfg, quiet(), db, connect)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	select {
	case <-j.Ready():
	case err := <-done:
		t.Fatalf("journal stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("journal not ready after 30s")
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("journal: %v", err)
		}
		db.Close()
	}
	t.Cleanup(stop)
	return j.Store(), stop
}

// reads is what a view answers to the reads the test compares.
func reads(t *testing.T, v *journal.View) string {
	t.Helper()
	ctx := context.Background()
	mods, err1 := v.Modules(ctx)
	nodes, err2 := v.Nodes(ctx)
	as, err3 := v.Assignments(ctx)
	toks, err4 := v.Tokens(ctx)
	audit, err5 := v.AuditSince(ctx, time.Time{}, 100)
	for _, err := range []error{err1, err2, err3, err4, err5} {
		if err != nil {
			t.Fatal(err)
		}
	}
	b, _ := json.Marshal([]any{mods, nodes, as, toks, audit})
	return string(b)
}

// A store written before the log (as genesis writes it), then through the
// log, is rebuilt whole from the log's snapshot and entries once deleted;
// and a restart applies no entry twice.
func TestViewRebuiltFromTheLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.db")
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddNode(ctx, store.Node{Name: "alpha", Address: "10.0.0.1", NKey: "UALPHA", Joined: at}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	connect := startBus(t, filepath.Join(dir, "js"))
	v, stop := running(t, path, connect)
	if _, err := v.RegisterModules(ctx, []spec.Module{{Name: "web", Version: "1"}}, at); err != nil {
		t.Fatal(err)
	}
	if err := v.Assign(ctx, "web", "alpha", map[string]string{"k": "v"}, at); err != nil {
		t.Fatal(err)
	}
	if err := v.Assign(ctx, "web", "nowhere", nil, at); err == nil {
		t.Fatal("Assign to no node: no error through the log")
	}
	if err := v.AddToken(ctx, store.Token{ID: "t1", Node: "beta", EnrolNKey: "UBETA", Created: at, Expires: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := v.Audit(ctx, store.AuditEntry{At: at, Operator: "op", Verb: "assign", Args: "{}", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	if err := v.Hold(ctx, "alpha", at, "test"); err != nil {
		t.Fatal(err)
	}
	want := reads(t, v)
	stop()

	v, stop = running(t, path, connect)
	if got := reads(t, v); got != want {
		t.Fatalf("after a restart the view answers\n%s\nwant\n%s", got, want)
	}
	stop()

	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := journal.Rebuild(ctx, js, journal.Config{}, path); err != nil {
		t.Fatal(err)
	}
	v, _ = running(t, path, connect)
	if got := reads(t, v); got != want {
		t.Fatalf("rebuilt, the view answers\n%s\nwant\n%s", got, want)
	}
}

// An entry appended and not applied (the controller killed between, or
// before the apply committed) is applied once at the next start.
func TestEntryAppendedThenKilledIsAppliedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.db")
	connect := startBus(t, filepath.Join(dir, "js"))
	v, stop := running(t, path, connect)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := v.Audit(ctx, store.AuditEntry{At: at, Operator: "op", Verb: "first", Args: "{}", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	stop()
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, journal.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	e := store.AuditEntry{At: at, Operator: "op", Verb: "second", Args: "{}", Outcome: "ok"}
	args, _ := json.Marshal(e)
	entry, _ := json.Marshal(map[string]any{"m": "Audit", "a": json.RawMessage(args)})
	if _, err := kv.Put(ctx, "w.killed", entry); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		v, stop = running(t, path, connect)
		got, err := v.AuditSince(ctx, time.Time{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Verb != "first" || got[1].Verb != "second" {
			t.Fatalf("audit = %+v, want first then second, once each", got)
		}
		stop()
	}
}

// An entry longer than one message of the bus may carry (the
// declarations of a push to a large fleet) is appended in parts and
// applied once, whole: at once, after a restart, and in a rebuilt view.
func TestLongEntryAppliedWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.db")
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var ds []store.Declaration
	for i := range 500 {
		name := fmt.Sprintf("n%03d", i)
		if err := db.AddNode(ctx, store.Node{Name: name, Address: "10.0.0.1", NKey: "U" + name, Joined: at}); err != nil {
			t.Fatal(err)
		}
		body := []byte(strings.Repeat(name, 2000)) // 8 KB a node, past 4 MB in all
		ds = append(ds, store.Declaration{Node: name, Seq: 1, Body: body, Sig: []byte("sig"), Sent: at, Expires: at.Add(time.Hour)})
	}
	db.Close()

	connect := startBus(t, filepath.Join(dir, "js"))
	v, stop := running(t, path, connect)
	failed, err := v.RecordDeclarations(ctx, ds)
	if err != nil || len(failed) > 0 {
		t.Fatalf("RecordDeclarations of %d declarations: %v, %v", len(ds), failed, err)
	}
	check := func(when string, v *journal.View) {
		t.Helper()
		for _, i := range []int{0, 250, 499} {
			d, err := v.LastDeclaration(ctx, ds[i].Node)
			if err != nil || d.Seq != 1 || string(d.Body) != string(ds[i].Body) {
				t.Fatalf("%s, %s's declaration: seq %d, %d bytes, %v; want seq 1, %d bytes", when, ds[i].Node, d.Seq, len(d.Body), err, len(ds[i].Body))
			}
		}
	}
	check("written", v)
	if err := v.Audit(ctx, store.AuditEntry{At: at, Operator: "op", Verb: "after", Args: "{}", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	stop()

	v, stop = running(t, path, connect)
	check("restarted", v)
	stop()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := journal.Rebuild(ctx, js, journal.Config{}, path); err != nil {
		t.Fatal(err)
	}
	v, _ = running(t, path, connect)
	check("rebuilt", v)
	if got, err := v.AuditSince(ctx, time.Time{}, 10); err != nil || len(got) != 1 {
		t.Fatalf("rebuilt, audit = %+v, %v; want the one entry after", got, err)
	}
}
