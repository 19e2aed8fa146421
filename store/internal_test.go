package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// A busy timeout given in Options reaches every pooled connection; none
// given is the default 5 s.
func TestBusyTimeoutOption(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		opts Options
		want int
	}{{Options{}, 5000}, {Options{BusyTimeout: 250 * time.Millisecond}, 250}} {
		db, err := OpenWith(ctx, filepath.Join(t.TempDir(), "mesh.db"), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		conns := make([]*sql.Conn, 3)
		for i := range conns {
			if conns[i], err = db.sql.Conn(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i, conn := range conns {
			var busy int
			if err := conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
				t.Fatal(err)
			}
			if busy != c.want {
				t.Errorf("%+v: connection %d: busy_timeout = %d, want %d", c.opts, i, busy, c.want)
			}
			conn.Close()
		}
		db.Close()
	}
}

// The pragmas live in the DSN, so every pooled connection has them, not only
// the one that happened to run a PRAGMA statement.
func TestPragmasOnEveryConnection(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "mesh.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	// Hold n connections at once, so the pool must open n distinct ones.
	const n = 6
	conns := make([]*sql.Conn, n)
	for i := range conns {
		c, err := db.sql.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	if open := db.sql.Stats().OpenConnections; open < n {
		t.Fatalf("pool has %d open connections, want at least %d", open, n)
	}

	var wg sync.WaitGroup
	errs := make(chan error, n*4)
	for i, c := range conns {
		wg.Add(1)
		go func(i int, c *sql.Conn) {
			defer wg.Done()
			var mode string
			var synchronous, busy, fk int
			if err := c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
				errs <- err
				return
			}
			if err := c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&synchronous); err != nil {
				errs <- err
				return
			}
			if err := c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
				errs <- err
				return
			}
			if err := c.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil {
				errs <- err
				return
			}
			if mode != "wal" {
				errs <- fmt.Errorf("connection %d: journal_mode = %q, want wal", i, mode)
			}
			if synchronous != 2 {
				errs <- fmt.Errorf("connection %d: synchronous = %d, want 2 (FULL)", i, synchronous)
			}
			if busy != 5000 {
				errs <- fmt.Errorf("connection %d: busy_timeout = %d, want 5000", i, busy)
			}
			if fk != 1 {
				errs <- fmt.Errorf("connection %d: foreign_keys = %d, want 1", i, fk)
			}
		}(i, c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A transaction takes the write lock when it begins (_txlock=immediate), so
// two writers never deadlock upgrading a read lock.
func TestTransactionsBeginImmediate(t *testing.T) {
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "mesh.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// A second transaction cannot begin while the first holds the write
	// lock, even though the first has not written anything yet.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	tx2, err := db.sql.BeginTx(short, nil)
	if err == nil {
		tx2.Rollback()
		t.Fatal("a second transaction began while the first held the write lock: transactions are not BEGIN IMMEDIATE")
	}
}

// Invariant 1 on a read: a store whose file is not a database fails Node,
// Nodes, NodeKeys, NodeCount and OpenTokens with an error that names the read and is not ErrNotFound.
func TestReadOfCorruptFileIsNotNotFound(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mesh.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddNode(ctx, Node{Name: "alpha", NKey: "UALPHA", Joined: time.Now()}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	os.Remove(path + "-wal")
	os.Remove(path + "-shm")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(strings.Repeat("garbage!", 16)), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// Open would refuse the file (migrations fail); reach the reads directly.
	raw, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	broken := newDB(raw)
	defer broken.Close()

	_, err = broken.Node(ctx, "alpha")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `read node "alpha"`) {
		t.Errorf("Node on a corrupt file = %v, want a failure naming the read, not ErrNotFound", err)
	}
	_, err = broken.Node(ctx, "ghost")
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Node(ghost) on a corrupt file = %v, want a failure, not ErrNotFound", err)
	}
	ns, err := broken.Nodes(ctx)
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "read nodes") {
		t.Errorf("Nodes on a corrupt file = %v, want a failure naming the read, not ErrNotFound", err)
	}
	if ns != nil {
		t.Errorf("Nodes returned %v beside an error", ns)
	}
	ks, err := broken.NodeKeys(ctx)
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "read nodes' keys") || ks != nil {
		t.Errorf("NodeKeys on a corrupt file = %v, %v, want a failure naming the read, not ErrNotFound", ks, err)
	}
	if n, err := broken.NodeCount(ctx); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "count nodes") {
		t.Errorf("NodeCount on a corrupt file = %d, %v, want a failure naming the read, not ErrNotFound", n, err)
	}
	ts, err := broken.OpenTokens(ctx)
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "read tokens") || ts != nil {
		t.Errorf("OpenTokens on a corrupt file = %v, %v, want a failure naming the read, not ErrNotFound", ts, err)
	}
	_, err = broken.Mesh(ctx)
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "read mesh") {
		t.Errorf("Mesh on a corrupt file = %v, want a failure naming the read, not ErrNotFound", err)
	}
}

// The migration that adds reports.failed marks the reports recorded
// before it that failed: a resource failed, or the declaration refused.
func TestReportFailedBackfill(t *testing.T) {
	ctx := context.Background()
	db, err := OpenWith(ctx, filepath.Join(t.TempDir(), "mesh.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	body, err := migrations.ReadFile("migrations/018_report_failed.sql")
	if err != nil {
		t.Fatal(err)
	}
	var backfill string
	for _, stmt := range strings.Split(string(body), ";") {
		if strings.Contains(stmt, "UPDATE reports") {
			backfill = stmt
		}
	}
	rows := map[string]struct {
		body   string
		failed bool
	}{
		"ok":      {`{"results":[{"name":"a","outcome":"unchanged"}]}`, false},
		"failed":  {`{"results":[{"name":"a","outcome":"created"},{"name":"b","outcome":"failed","error":"x"}]}`, true},
		"refused": {`{"refused":"expired","results":[]}`, true},
		"none":    {`{"results":null}`, false},
	}
	for node, r := range rows {
		if _, err := db.sql.ExecContext(ctx, `INSERT INTO nodes (name, address, nkey, joined_at) VALUES (?, '10.0.0.1', ?, '2026-01-01T00:00:00Z')`, node, "U"+node); err != nil {
			t.Fatal(err)
		}
		if _, err := db.sql.ExecContext(ctx, `INSERT INTO reports (node, seq, body, received_at) VALUES (?, 1, ?, '2026-01-01T00:00:00Z')`, node, r.body); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.sql.ExecContext(ctx, backfill); err != nil {
		t.Fatalf("backfill: %v", err)
	}
	for node, r := range rows {
		var failed bool
		if err := db.sql.QueryRowContext(ctx, `SELECT failed FROM reports WHERE node = ?`, node).Scan(&failed); err != nil || failed != r.failed {
			t.Errorf("%s: failed %v, %v; want %v", node, failed, err, r.failed)
		}
	}
}
