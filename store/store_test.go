package store_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

func openTemp(t *testing.T) (*store.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mesh.db")
	db, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

// countMigrationRows reads schema_migrations through a connection of its own.
func countMigrationRows(t *testing.T, path string) int {
	t.Helper()
	raw, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRow(`SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil {
		t.Fatalf("count schema_migrations: %v", err)
	}
	return n
}

func TestOpenAppliesMigrationsOnce(t *testing.T) {
	ctx := context.Background()
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for i := range entries {
		want = append(want, i+1)
	}
	if len(want) == 0 {
		t.Fatal("no migrations in store/migrations")
	}

	db, path := openTemp(t)
	got, err := db.Migrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Migrations after first Open = %v, want %v", got, want)
	}
	if err := db.CreateMesh(ctx, store.Mesh{Name: "m", Created: time.Now()}, store.Operator{Name: "op", NKey: "UOP"}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	rows := countMigrationRows(t, path)
	if rows != len(want) {
		t.Fatalf("schema_migrations holds %d rows after first Open, want %d", rows, len(want))
	}

	for i := 0; i < 2; i++ {
		db2, err := store.Open(ctx, path)
		if err != nil {
			t.Fatalf("re-Open #%d: %v", i+1, err)
		}
		got, err := db2.Migrations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Migrations after re-Open #%d = %v, want %v", i+1, got, want)
		}
		// Data written before survives: no migration ran again over it.
		if m, err := db2.Mesh(ctx); err != nil || m.Name != "m" {
			t.Errorf("Mesh after re-Open #%d = %+v, %v; want the mesh recorded before", i+1, m, err)
		}
		db2.Close()
		if n := countMigrationRows(t, path); n != rows {
			t.Errorf("schema_migrations holds %d rows after re-Open #%d, want %d", n, i+1, rows)
		}
	}
}

func TestMeshRoundTrip(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)

	if _, err := db.Mesh(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Mesh of an empty store = %v, want ErrNotFound", err)
	}
	created := time.Date(2024, 5, 1, 10, 0, 0, 123456789, time.FixedZone("x", 2*3600))
	if err := db.CreateMesh(ctx, store.Mesh{Name: "prod", Created: created}, store.Operator{Name: "alice", NKey: "UALICE"}); err != nil {
		t.Fatalf("CreateMesh: %v", err)
	}
	m, err := db.Mesh(ctx)
	if err != nil {
		t.Fatalf("Mesh: %v", err)
	}
	if m.Name != "prod" || !m.Created.Equal(created) {
		t.Errorf("Mesh = %+v, want prod created %v", m, created)
	}
	ops, err := db.Operators(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.Operator{{Name: "alice", NKey: "UALICE"}}; !reflect.DeepEqual(ops, want) {
		t.Errorf("Operators = %+v, want %+v", ops, want)
	}

	err = db.CreateMesh(ctx, store.Mesh{Name: "other", Created: created}, store.Operator{Name: "bob", NKey: "UBOB"})
	if err == nil {
		t.Fatal("a second CreateMesh succeeded")
	}
	if !strings.Contains(err.Error(), `"other"`) {
		t.Errorf("second CreateMesh error %q does not name the mesh", err)
	}
	// The refused call changed nothing: its transaction rolled back whole.
	if m, err := db.Mesh(ctx); err != nil || m.Name != "prod" {
		t.Errorf("Mesh after a refused CreateMesh = %+v, %v; want prod", m, err)
	}
	if ops, err := db.Operators(ctx); err != nil || len(ops) != 1 {
		t.Errorf("Operators after a refused CreateMesh = %+v, %v; want alice only", ops, err)
	}
}

func TestNodes(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	joined := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

	for _, n := range []store.Node{
		{Name: "web2", Address: "10.0.0.2", NKey: "UWEB2", Joined: joined},
		{Name: "alpha", Address: "10.0.0.1", NKey: "UALPHA", Joined: joined.Add(time.Minute)},
		{Name: "web10", Address: "10.0.0.10", NKey: "UWEB10", Joined: joined},
	} {
		if err := db.AddNode(ctx, n); err != nil {
			t.Fatalf("AddNode(%s): %v", n.Name, err)
		}
	}
	err := db.AddNode(ctx, store.Node{Name: "alpha", Address: "10.0.0.9", NKey: "UOTHER", Joined: joined})
	if err == nil {
		t.Fatal("AddNode of an existing name succeeded")
	}
	if !strings.Contains(err.Error(), `"alpha"`) {
		t.Errorf("AddNode error %q does not name the node", err)
	}

	n, err := db.Node(ctx, "alpha")
	if err != nil {
		t.Fatalf("Node(alpha): %v", err)
	}
	if n.Name != "alpha" || n.Address != "10.0.0.1" || n.NKey != "UALPHA" || !n.Joined.Equal(joined.Add(time.Minute)) {
		t.Errorf("Node(alpha) = %+v", n)
	}
	if !n.LastHeard.IsZero() || n.Facts != nil || n.AppliedSeq != 0 || n.HostVersion != "" {
		t.Errorf("Node(alpha) never heard has %+v", n)
	}

	ns, err := db.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range ns {
		names = append(names, n.Name)
	}
	if want := []string{"alpha", "web10", "web2"}; !reflect.DeepEqual(names, want) {
		t.Errorf("Nodes = %v, want %v (by name)", names, want)
	}

	heard := time.Date(2024, 5, 2, 8, 30, 0, 5, time.UTC)
	hb := spec.Heartbeat{Node: "alpha", Time: heard, AppliedSeq: 42, HostVersion: "deadbeef", Protocol: spec.Protocol, IntervalMS: 1500}
	if err := db.RecordHeartbeat(ctx, hb, heard); err != nil {
		t.Fatalf("RecordHeartbeat: %v", err)
	}
	factsAt := heard.Add(time.Second)
	facts := spec.Facts{
		Node: "alpha", Time: factsAt, Arch: "amd64", OS: "linux", Kernel: "6.1.0",
		Distro: "Debian GNU/Linux", DistroVer: "12", CPUModel: "cpu", Cores: 8,
		MemoryBytes: 1 << 34, DiskBytes: 1 << 40, DiskFree: 1 << 39, Virtual: "physical",
		UptimeSecond: 3600, Hostname: "alpha.local", Errors: []string{"disk: nope"},
	}
	if err := db.RecordFacts(ctx, facts, factsAt); err != nil {
		t.Fatalf("RecordFacts: %v", err)
	}

	n, err = db.Node(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if !n.LastHeard.Equal(heard) {
		t.Errorf("LastHeard = %v, want %v", n.LastHeard, heard)
	}
	if n.AppliedSeq != 42 || n.HostVersion != "deadbeef" || n.Protocol != spec.Protocol || n.Heartbeat != 1500*time.Millisecond {
		t.Errorf("after heartbeat Node = %+v", n)
	}
	// A heartbeat that does not say its interval (an older host) records
	// none: the controller falls back to its fixed window.
	hb.IntervalMS = 0
	if err := db.RecordHeartbeat(ctx, hb, heard); err != nil {
		t.Fatalf("RecordHeartbeat: %v", err)
	}
	if n, err := db.Node(ctx, "alpha"); err != nil || n.Heartbeat != 0 {
		t.Errorf("after a heartbeat without its interval: %v, %v", n.Heartbeat, err)
	}
	// Batched as the controller writes them, too.
	hb.IntervalMS = 2000
	if failed, err := db.RecordHeartbeats(ctx, []spec.Heartbeat{hb}, heard); err != nil || len(failed) != 0 {
		t.Fatalf("RecordHeartbeats: %v %v", failed, err)
	}
	if n, err := db.Node(ctx, "alpha"); err != nil || n.Heartbeat != 2*time.Second {
		t.Errorf("after a batch with its interval: %v, %v", n.Heartbeat, err)
	}
	if n.Facts == nil {
		t.Fatal("Facts = nil after RecordFacts")
	}
	got := *n.Facts
	if !got.Time.Equal(facts.Time) {
		t.Errorf("Facts.Time = %v, want %v", got.Time, facts.Time)
	}
	got.Time, facts.Time = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, facts) {
		t.Errorf("Facts = %+v, want %+v", got, facts)
	}
	// The other nodes are untouched.
	other, err := db.Node(ctx, "web2")
	if err != nil {
		t.Fatal(err)
	}
	if !other.LastHeard.IsZero() || other.Facts != nil || other.AppliedSeq != 0 {
		t.Errorf("web2 changed by alpha's reports: %+v", other)
	}
	// Nodes shows the same as Node.
	ns, err = db.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !ns[0].LastHeard.Equal(heard) || ns[0].Facts == nil || ns[0].Facts.Cores != 8 {
		t.Errorf("Nodes()[0] = %+v, want alpha as heard", ns[0])
	}
}

func TestNotFound(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	if err := db.AddNode(ctx, store.Node{Name: "alpha", NKey: "UALPHA", Joined: time.Now()}); err != nil {
		t.Fatal(err)
	}

	_, err := db.Node(ctx, "ghost")
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Node(ghost) = %v, want ErrNotFound", err)
	} else if !strings.Contains(err.Error(), `"ghost"`) {
		t.Errorf("Node(ghost) error %q does not name the node", err)
	}

	err = db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "ghost", AppliedSeq: 1}, time.Now())
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RecordHeartbeat(ghost) = %v, want ErrNotFound", err)
	} else if !strings.Contains(err.Error(), `"ghost"`) {
		t.Errorf("RecordHeartbeat(ghost) error %q does not name the node", err)
	}
	err = db.RecordFacts(ctx, spec.Facts{Node: "ghost"}, time.Now())
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RecordFacts(ghost) = %v, want ErrNotFound", err)
	}
	// A missing node's report touched no one else.
	n, err := db.Node(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if !n.LastHeard.IsZero() || n.Facts != nil {
		t.Errorf("alpha changed by ghost's reports: %+v", n)
	}
}

// Invariant 1: a store that cannot answer says so; it never says "not found".
func TestFailureIsNotNotFound(t *testing.T) {
	ctx := context.Background()

	t.Run("closed", func(t *testing.T) {
		db, _ := openTemp(t)
		if err := db.AddNode(ctx, store.Node{Name: "alpha", NKey: "UALPHA", Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
		db.Close()

		_, err := db.Node(ctx, "alpha")
		assertFailure(t, "Node", err, "read node", `"alpha"`)
		ns, err := db.Nodes(ctx)
		assertFailure(t, "Nodes", err, "read nodes")
		if ns != nil {
			t.Errorf("Nodes returned %v beside an error", ns)
		}
		_, err = db.Mesh(ctx)
		assertFailure(t, "Mesh", err, "read mesh")
		err = db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha"}, time.Now())
		assertFailure(t, "RecordHeartbeat", err, "record heartbeat", `"alpha"`)
		err = db.RecordFacts(ctx, spec.Facts{Node: "alpha"}, time.Now())
		assertFailure(t, "RecordFacts", err, "record facts", `"alpha"`)
	})

	t.Run("locked", func(t *testing.T) {
		db, path := openTemp(t)
		if err := db.AddNode(ctx, store.Node{Name: "alpha", NKey: "UALPHA", Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
		other, err := sql.Open("sqlite", store.DSN(path))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		conn, err := other.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `BEGIN EXCLUSIVE`); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(ctx, `UPDATE nodes SET address = 'locked'`); err != nil {
			t.Fatal(err)
		}
		// The store waits for the lock (busy_timeout) until the caller's
		// deadline, then fails: the node exists, and the answer is a failure.
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err = db.RecordHeartbeat(short, spec.Heartbeat{Node: "alpha", AppliedSeq: 9}, time.Now())
		assertFailure(t, "RecordHeartbeat under a lock", err, "record heartbeat", `"alpha"`)

		if _, err := conn.ExecContext(ctx, `ROLLBACK`); err != nil {
			t.Fatal(err)
		}
		n, err := db.Node(ctx, "alpha")
		if err != nil {
			t.Fatal(err)
		}
		if n.AppliedSeq != 0 || n.Address == "locked" {
			t.Errorf("after the failed write and the rollback Node = %+v", n)
		}
		// Once the lock is gone the same write succeeds.
		if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: 9}, time.Now()); err != nil {
			t.Fatalf("RecordHeartbeat after the lock was released: %v", err)
		}
	})

	t.Run("not a database", func(t *testing.T) {
		db, path := openTemp(t)
		if err := db.AddNode(ctx, store.Node{Name: "alpha", NKey: "UALPHA", Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		clobberHeader(t, path)
		db2, err := store.Open(ctx, path)
		if err == nil {
			db2.Close()
			t.Fatal("Open of a file that is not a database succeeded")
		}
		assertFailure(t, "Open", err, "migrate store", path)
	})
}

// rawExec runs statements on the store's file through a connection of its own.
func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	raw, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, s := range stmts {
		if _, err := raw.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// A statement that fails inside a write (here a trigger that aborts) is a
// failure naming the node, never "not found", and changes nothing.
func TestWriteFailureIsNotNotFound(t *testing.T) {
	ctx := context.Background()
	db, path := openTemp(t)
	if err := db.AddNode(ctx, store.Node{Name: "alpha", NKey: "UALPHA", Joined: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rawExec(t, path, `CREATE TRIGGER refuse BEFORE UPDATE ON nodes BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END`)

	err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: 3}, time.Now())
	assertFailure(t, "RecordHeartbeat", err, `record heartbeat of node "alpha"`, "refused by trigger")
	err = db.RecordFacts(ctx, spec.Facts{Node: "alpha", Cores: 2}, time.Now())
	assertFailure(t, "RecordFacts", err, `record facts of node "alpha"`, "refused by trigger")
	n, err := db.Node(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if n.AppliedSeq != 0 || n.Facts != nil || !n.LastHeard.IsZero() {
		t.Errorf("a failed write changed the node: %+v", n)
	}
}

// A transaction whose second statement fails keeps nothing of its first.
func TestCreateMeshIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	db, path := openTemp(t)
	rawExec(t, path, `CREATE TRIGGER refuse BEFORE INSERT ON operators BEGIN SELECT RAISE(ABORT, 'refused by trigger'); END`)
	err := db.CreateMesh(ctx, store.Mesh{Name: "prod", Created: time.Now()}, store.Operator{Name: "alice", NKey: "UALICE"})
	assertFailure(t, "CreateMesh", err, `record mesh "prod"`, "refused by trigger")
	if m, err := db.Mesh(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("after a failed CreateMesh Mesh = %+v, %v; want ErrNotFound (the mesh row rolled back)", m, err)
	}
	rawExec(t, path, `DROP TRIGGER refuse`)
	if err := db.CreateMesh(ctx, store.Mesh{Name: "prod", Created: time.Now()}, store.Operator{Name: "alice", NKey: "UALICE"}); err != nil {
		t.Errorf("CreateMesh after the failed one: %v", err)
	}
}

// A row the store cannot read fails Node and Nodes; Nodes returns no roster
// beside the error (invariant 1).
func TestUnreadableRowIsNotNotFound(t *testing.T) {
	ctx := context.Background()
	db, path := openTemp(t)
	for _, name := range []string{"alpha", "beta"} {
		if err := db.AddNode(ctx, store.Node{Name: name, NKey: "U" + name, Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	rawExec(t, path, `UPDATE nodes SET joined_at = 'yesterday' WHERE name = 'beta'`)

	_, err := db.Node(ctx, "beta")
	assertFailure(t, "Node(beta)", err, `read node "beta"`, "joined_at")
	ns, err := db.Nodes(ctx)
	assertFailure(t, "Nodes", err, "read nodes", "joined_at")
	if ns != nil {
		t.Errorf("Nodes returned %d nodes beside an error", len(ns))
	}
	if _, err := db.Node(ctx, "alpha"); err != nil {
		t.Errorf("Node(alpha), a readable row: %v", err)
	}
}

func TestDSN(t *testing.T) {
	dsn := store.DSN("/var/lib/mesh/controller/mesh.db")
	path, query, ok := strings.Cut(dsn, "?")
	if !ok || path != "file:/var/lib/mesh/controller/mesh.db" {
		t.Fatalf("DSN = %q", dsn)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"journal_mode(WAL)", "synchronous(FULL)", "busy_timeout(5000)"} {
		if !slices.Contains(q["_pragma"], want) {
			t.Errorf("DSN pragmas %q lack %s", q["_pragma"], want)
		}
	}
	if q.Get("_txlock") != "immediate" {
		t.Errorf("DSN _txlock = %q, want immediate", q.Get("_txlock"))
	}
}

// clobberHeader overwrites the SQLite header (and the WAL beside it) so the
// file is no longer a database.
func clobberHeader(t *testing.T, path string) {
	t.Helper()
	os.Remove(path + "-wal")
	os.Remove(path + "-shm")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(strings.Repeat("garbage!", 16)), 0); err != nil {
		t.Fatal(err)
	}
}

func assertFailure(t *testing.T, call string, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s on a failing store returned no error", call)
		return
	}
	if errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s on a failing store = %v, which is ErrNotFound: a failure is never \"not found\"", call, err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s error %q does not contain %q", call, err, w)
		}
	}
}

// TestIsBusy: a write that waited out the busy timeout behind another
// process's write lock is known as busy; other failures are not.
func TestIsBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A short busy timeout: the write behind the lock waits it out, and
	// the default would have the test wait 5 s for nothing more.
	path := filepath.Join(t.TempDir(), "mesh.db")
	db, err := store.OpenWith(ctx, path, store.Options{BusyTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.AddNode(ctx, store.Node{Name: "alpha", NKey: "UALPHA", Joined: time.Now()}); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	err = db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: 1}, time.Now())
	if err == nil || !store.IsBusy(err) {
		t.Fatalf("a write behind a lock: %v, want it known as busy", err)
	}
	conn.ExecContext(ctx, `ROLLBACK`)
	if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "ghost"}, time.Now()); store.IsBusy(err) {
		t.Fatalf("a missing node is not busy: %v", err)
	}
	// A sequence past what SQLite keeps is refused by the store, clearly,
	// and is not busy either.
	err = db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: 1 << 63}, time.Now())
	if err == nil || store.IsBusy(err) || !strings.Contains(err.Error(), "above 2^63-1") {
		t.Fatalf("a sequence of 2^63: %v", err)
	}
}

// TestNodeKeysAndOpenTokens: the lean reads the bus's users are composed
// from give what the whole reads give for them: every node's key by name,
// whether its removal began, and the tokens neither used nor revoked (an
// expired one too: the controller judges expiry by its own clock).
func TestNodeKeysAndOpenTokens(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	now := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, n := range []store.Node{{Name: "web2", NKey: "UWEB2", Joined: now}, {Name: "alpha", NKey: "UALPHA", Joined: now}} {
		if err := db.AddNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.BeginRemoval(ctx, "web2", now); err != nil {
		t.Fatal(err)
	}
	keys, err := db.NodeKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.NodeKey{{Name: "alpha", NKey: "UALPHA"}, {Name: "web2", NKey: "UWEB2", Removing: true}}; !reflect.DeepEqual(keys, want) {
		t.Errorf("NodeKeys = %+v, want %+v", keys, want)
	}
	if n, err := db.NodeCount(ctx); err != nil || n != 2 {
		t.Errorf("NodeCount = %d, %v, want 2 (the node being removed counts)", n, err)
	}
	if n, leaving, err := db.NodesLeaving(ctx); err != nil || n != 2 || leaving != 1 {
		t.Errorf("NodesLeaving = %d, %d, %v, want 2 and 1 (web2 is being removed)", n, leaving, err)
	}

	for i, id := range []string{"open", "used", "revoked", "expired"} {
		tok := store.Token{ID: id, Node: "n" + id, EnrolNKey: "U" + id, Created: now.Add(time.Duration(i) * time.Second), Expires: now.Add(time.Hour)}
		if id == "expired" {
			tok.Expires = now.Add(-time.Minute)
		}
		if err := db.AddToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Enrol(ctx, "used", store.Node{Name: "nused", NKey: "UNUSED", Joined: now}); err != nil {
		t.Fatal(err)
	}
	if err := db.RevokeToken(ctx, "revoked", now); err != nil {
		t.Fatal(err)
	}
	open, err := db.OpenTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all, err := db.Tokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []store.Token
	for _, tok := range all {
		if tok.Used.IsZero() && tok.Revoked.IsZero() {
			want = append(want, tok)
		}
	}
	if len(want) != 2 || want[0].ID != "open" || want[1].ID != "expired" {
		t.Fatalf("Tokens gives %+v as neither used nor revoked, want open and expired", want)
	}
	if !reflect.DeepEqual(open, want) {
		t.Errorf("OpenTokens = %+v, want %+v", open, want)
	}
}

// TestMigrationsAreAllOrNone: a migration that fails (here 013, whose
// table is already there) leaves the store as it was: none of the
// migrations before it in the same Open is kept, and Open names the one
// that failed.
func TestMigrationsAreAllOrNone(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mesh.db")
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`CREATE TABLE rosters (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	_, err = store.Open(context.Background(), path)
	if err == nil || !strings.Contains(err.Error(), "013_rosters") {
		t.Fatalf("Open over a store that has 013's table already: %v, want the failure of 013_rosters", err)
	}
	if n := countMigrationRows(t, path); n != 0 {
		t.Fatalf("schema_migrations holds %d rows after a failed Open, want 0: every migration of a failed Open is undone", n)
	}
}
