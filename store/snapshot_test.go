package store_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// A snapshot taken before a newer version migrates the store, restored
// after that version failed, gives the store back as it was: the newer
// table gone, the rows written before it kept, the write-ahead log of the
// replaced store gone with it, and SQLite's integrity check passing.
func TestSnapshotRestoresTheStoreAsItWas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.db")
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	before, err := db.Migrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddCADomain(ctx, "example.org", time.Now()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	snap := filepath.Join(dir, "mesh.db.before-v2")
	// A stale file at the snapshot's path is replaced, not kept.
	if err := os.WriteFile(snap, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := store.Snapshot(ctx, path, snap); err != nil {
		t.Fatal(err)
	}

	// The newer version migrates: a table of its own and a migration row,
	// left in the write-ahead log.
	raw, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE v2_things (id INTEGER PRIMARY KEY, what TEXT NOT NULL)`,
		`INSERT INTO v2_things (what) VALUES ('new')`,
		`INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '999_v2.sql', 'now')`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	raw.Close()
	if err := os.WriteFile(path+"-wal", []byte("the replaced store's log"), 0o600); err != nil {
		t.Fatal(err)
	}

	if err := store.Restore(snap, path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snap); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the snapshot is still there after the restore: %v", err)
	}
	if _, err := os.Stat(path + "-wal"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the replaced store's write-ahead log is still there: %v", err)
	}
	raw, err = sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var ok string
	if err := raw.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Errorf("integrity_check: %q, %v", ok, err)
	}
	var n int
	if err := raw.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'v2_things'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the newer version's table is still there (%d, %v)", n, err)
	}
	raw.Close()
	db, err = store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	after, err := db.Migrations(ctx)
	if err != nil || len(after) != len(before) {
		t.Errorf("migrations after the restore %v (%v), want %v", after, err, before)
	}
	if domains, err := db.CADomains(ctx); err != nil || len(domains) != 1 || domains[0].Name != "example.org" {
		t.Errorf("the row written before the snapshot: %+v (%v)", domains, err)
	}
}

// Bad input changes nothing: a restore without a snapshot leaves the store.
func TestRestoreWithoutASnapshotChangesNothing(t *testing.T) {
	t.Parallel()
	_, path := openTemp(t)
	if err := store.Restore(path+".before-none", path); err == nil {
		t.Fatal("a restore from no snapshot succeeded")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the store went: %v", err)
	}
}
