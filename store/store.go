// Package store keeps the controller's state in SQLite. Every write goes
// through one of this package's methods, one transaction each; nothing else
// writes SQL, so the store can later become a view of a replicated log
// without its callers changing.
package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite" // also the database/sql driver "sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNotFound is returned by lookups of one thing that does not exist. Any
// other error means the store could not answer, which is never "not found".
var ErrNotFound = errors.New("not found")

//go:embed migrations/*.sql
var migrations embed.FS

// DB is the controller's store. Its methods are those of its concerns, each
// a type in its own file sharing one database; DB itself keeps the
// lifecycle: opening, migrating and closing.
type DB struct {
	*core
	meshes
	nodes
	tokens
	modules
	declarations
	reports
	rosters
	blobs
	collector
	certs
	releases
	rolls
	grants
	auditLog
	overlays
}

// core is what every concern shares: the database, and the queue of this
// process's writes.
type core struct {
	sql *sql.DB
	// writeMu queues this process's write transactions in Go. SQLite admits
	// one writer at a time; left to its busy handler, concurrent writers
	// sleep in growing steps (1, 2, 5, 10... ms) and a burst of reports
	// during a push costs milliseconds each.
	writeMu sync.Mutex
}

// newDB is the store over sqldb, every concern sharing it.
func newDB(sqldb *sql.DB) *DB {
	c := &core{sql: sqldb}
	return &DB{
		core:         c,
		meshes:       meshes{c},
		nodes:        nodes{c},
		tokens:       tokens{c},
		modules:      modules{c},
		declarations: declarations{c},
		reports:      reports{c},
		rosters:      rosters{c},
		blobs:        blobs{c},
		collector:    collector{c},
		certs:        certs{c},
		releases:     releases{c},
		rolls:        rolls{c},
		grants:       grants{c},
		auditLog:     auditLog{c},
		overlays:     overlays{c},
	}
}

// DefaultBusyTimeout is how long a write waits for another writer's lock
// before it fails, unless Options say otherwise.
const DefaultBusyTimeout = 5 * time.Second

// Options are how a store is opened; the zero value is the default.
type Options struct {
	// BusyTimeout is how long a write waits for another writer's lock
	// before it fails (DefaultBusyTimeout when zero).
	BusyTimeout time.Duration
	// ViewOfLog says the store is a view of a log that keeps every write
	// it applies, synced, and applies again what the view lost: its
	// commits are then not synced (WAL with synchronous NORMAL), so a
	// crash may lose the last of them, whole, never part of one nor
	// the applied revision apart from its write.
	ViewOfLog bool
}

// DSN is the data source name for the file at path, with the default
// options.
func DSN(path string) string { return Options{}.DSN(path) }

// DSN is the data source name for the file at path. The pragmas live in the
// DSN so every pooled connection has them.
func (o Options) DSN(path string) string {
	busy := o.BusyTimeout
	if busy <= 0 {
		busy = DefaultBusyTimeout
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	if o.ViewOfLog {
		q.Add("_pragma", "synchronous(NORMAL)")
	} else {
		q.Add("_pragma", "synchronous(FULL)")
	}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", max(busy.Milliseconds(), 1)))
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// Open opens the store at path, creating it if absent, and applies every
// migration it has not recorded yet.
func Open(ctx context.Context, path string) (*DB, error) { return OpenWith(ctx, path, Options{}) }

// OpenWith is Open with opts.
func OpenWith(ctx context.Context, path string, opts Options) (*DB, error) {
	sqldb, err := sql.Open("sqlite", opts.DSN(path))
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db := newDB(sqldb)
	if err := db.migrate(ctx, true); err != nil {
		sqldb.Close()
		return nil, fmt.Errorf("migrate store %s: %w", path, err)
	}
	return db, nil
}

// Close closes the store.
func (db *DB) Close() error { return db.sql.Close() }

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: name must start with a number and '_'", e.Name())
		}
		body, err := fs.ReadFile(migrations, "migrations/"+e.Name())
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected number %d", m.name, i+1)
		}
	}
	return ms, nil
}

// migrate applies every migration the store has not recorded. With
// fresh, a file that holds nothing yet takes the schema they end in
// (schema.sql) in one step.
func (db *DB) migrate(ctx context.Context, fresh bool) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	if _, err := db.sql.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	// The pending migrations are applied in one transaction, all or none:
	// a fresh store is one commit, not one per migration, and a store
	// holds no schema half way between two versions of mesh.
	pending := func(q interface {
		QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	}) ([]migration, error) {
		rows, err := q.QueryContext(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return nil, fmt.Errorf("read the applied migrations: %w", err)
		}
		defer rows.Close()
		applied := map[int]bool{}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return nil, fmt.Errorf("read the applied migrations: %w", err)
			}
			applied[v] = true
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("read the applied migrations: %w", err)
		}
		var unapplied []migration
		for _, m := range ms {
			if !applied[m.version] {
				unapplied = append(unapplied, m)
			}
		}
		return unapplied, nil
	}
	unapplied, err := pending(db.sql)
	if err != nil || len(unapplied) == 0 {
		return err
	}
	return db.tx(ctx, func(tx *sql.Tx) error {
		unapplied, err := pending(tx) // again, under the write lock
		if err != nil {
			return err
		}
		now := time.Now().UTC().Format(time.RFC3339Nano)
		whole := fresh && len(unapplied) == len(ms)
		if whole {
			// Only a file holding nothing yet takes the schema whole; a
			// store holding tables runs each migration, naming any that
			// fails.
			var held int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name != 'schema_migrations'`).Scan(&held); err != nil {
				return fmt.Errorf("read the store's schema: %w", err)
			}
			whole = held == 0
		}
		if whole {
			if err := applySchema(ctx, tx, len(ms)); err != nil {
				return err
			}
		}
		for _, m := range unapplied {
			if !whole {
				if _, err := tx.ExecContext(ctx, m.sql); err != nil {
					return fmt.Errorf("apply migration %s: %w", m.name, err)
				}
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`, m.version, m.name, now); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.name, err)
			}
		}
		return nil
	})
}

// Migrations returns the numbers of the migrations the store has applied.
func (db *DB) Migrations(ctx context.Context) ([]int, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read migrations: %w", err)
		}
		vs = append(vs, v)
	}
	return vs, rows.Err()
}

func (c *core) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	tx, err := c.sql.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := recordRevision(ctx, tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// checkSeq refuses a sequence SQLite cannot keep: its integers are signed
// 64-bit, and the driver refuses a uint64 with the high bit set.
func checkSeq(seq uint64) error {
	if seq > math.MaxInt64 {
		return fmt.Errorf("sequence %d is above 2^63-1, the largest the store keeps", seq)
	}
	return nil
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func parseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// ErrBusy says the store is busy: another writer holds it. IsBusy knows
// SQLite's own busy errors too.
var ErrBusy = errors.New("the store is busy: another writer holds it")

// IsBusy reports whether err is ErrBusy or SQLite's "busy" or "locked":
// another writer holds the store, and every write fails alike until it
// lets go.
func IsBusy(err error) bool {
	if errors.Is(err, ErrBusy) {
		return true
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}
