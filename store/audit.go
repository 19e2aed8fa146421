package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// AuditEntry is one operator API call.
type AuditEntry struct {
	ID       int64
	At       time.Time
	Operator string
	Verb     string
	Args     string // JSON, secrets redacted by the caller
	Outcome  string // "ok" or the error
}

// auditTime is fixed-width, so times compare as text.
func auditTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000000Z") }

// auditLog is the audit log of operators' acts.
type auditLog struct{ *core }

// Audit records one entry.
func (db *auditLog) Audit(ctx context.Context, e AuditEntry) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO audit (at, operator, verb, args, outcome) VALUES (?, ?, ?, ?, ?)`,
			auditTime(e.At), e.Operator, e.Verb, e.Args, e.Outcome)
		return err
	})
	if err != nil {
		return fmt.Errorf("record audit entry for %s: %w", e.Verb, err)
	}
	return nil
}

// AuditSince returns the entries at or after since, oldest first, at most limit.
func (db *auditLog) AuditSince(ctx context.Context, since time.Time, limit int) ([]AuditEntry, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT id, at, operator, verb, args, outcome FROM audit WHERE at >= ? ORDER BY id LIMIT ?`,
		auditTime(since), limit)
	if err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	defer rows.Close()
	var es []AuditEntry
	for rows.Next() {
		var e AuditEntry
		var at string
		if err := rows.Scan(&e.ID, &at, &e.Operator, &e.Verb, &e.Args, &e.Outcome); err != nil {
			return nil, fmt.Errorf("read audit: %w", err)
		}
		if e.At, err = parseTime(at); err != nil {
			return nil, fmt.Errorf("read audit: %w", err)
		}
		es = append(es, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read audit: %w", err)
	}
	return es, nil
}
