package store

import (
	"context"
	"database/sql"
	"fmt"
)

// revision is the log entry a write applies: core.tx records it in the
// write's own transaction.
type revision struct {
	rev      uint64
	recorded bool
}

type revisionKey struct{}

// WithRevision is ctx for a write that applies the log entry of revision
// rev: the write's transaction records rev as the store's applied
// revision before it commits, so the entry's effect and its revision are
// kept together or not at all.
func WithRevision(ctx context.Context, rev uint64) context.Context {
	return context.WithValue(ctx, revisionKey{}, &revision{rev: rev})
}

// Recorded says whether a write under ctx, made by WithRevision, recorded
// its revision: one that wrote nothing ran no transaction.
func Recorded(ctx context.Context) bool {
	r, _ := ctx.Value(revisionKey{}).(*revision)
	return r != nil && r.recorded
}

// recordRevision records the revision ctx carries, if any, in tx.
func recordRevision(ctx context.Context, tx *sql.Tx) error {
	r, _ := ctx.Value(revisionKey{}).(*revision)
	if r == nil {
		return nil
	}
	if err := checkSeq(r.rev); err != nil {
		return fmt.Errorf("record applied revision: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE view SET applied = ?`, int64(r.rev)); err != nil {
		return fmt.Errorf("record applied revision %d: %w", r.rev, err)
	}
	r.recorded = true
	return nil
}

// Applied is the revision of the last log entry the store applied; 0 if
// none.
func (db *DB) Applied(ctx context.Context) (uint64, error) {
	var rev int64
	if err := db.sql.QueryRowContext(ctx, `SELECT applied FROM view`).Scan(&rev); err != nil {
		return 0, fmt.Errorf("read the applied revision: %w", err)
	}
	return uint64(rev), nil
}

// MarkApplied records rev as the store's applied revision, and changes
// nothing else: an entry with no effect (refused, or a mark in the log)
// is applied so.
func (db *DB) MarkApplied(ctx context.Context, rev uint64) error {
	return db.tx(WithRevision(ctx, rev), func(*sql.Tx) error { return nil })
}

// Sync makes every write committed so far durable, in a store opened as
// a view of a log (whose commits are not synced each): it checkpoints the
// write-ahead log, which syncs it and then the database.
func (db *DB) Sync(ctx context.Context) error {
	if _, err := db.sql.ExecContext(ctx, `PRAGMA wal_checkpoint(FULL)`); err != nil {
		return fmt.Errorf("sync the store: %w", err)
	}
	return nil
}

// CopyTo writes a consistent copy of the open store to the new file into
// (VACUUM INTO), while writes go on.
func (db *DB) CopyTo(ctx context.Context, into string) error {
	if _, err := db.sql.ExecContext(ctx, `VACUUM INTO ?`, into); err != nil {
		return fmt.Errorf("copy the store into %s: %w", into, err)
	}
	return syncFile(into)
}
