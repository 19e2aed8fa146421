package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Roster is a roster message sent: its exact signed bytes and signature,
// and the digest of the names it holds.
type Roster struct {
	Seq  uint64
	Body []byte
	Sig  []byte
	// Content is the digest of the names alone, as the controller
	// computed it when it sent them: what a push compares.
	Content string
	Sent    time.Time
	Expires time.Time
}

// rostersKept is how many roster messages the store keeps: the last is
// the one in force, the others are history for the operator.
const rostersKept = 8

// rosters are the rosters sent to the mesh.
type rosters struct{ *core }

// RecordRoster records r as the roster in force. A sequence not above the
// last recorded is refused: sequences only go up. Rosters older than the
// last rostersKept are dropped in the same transaction.
func (db *rosters) RecordRoster(ctx context.Context, r Roster) error {
	if err := checkSeq(r.Seq); err != nil {
		return fmt.Errorf("record roster: %w", err)
	}
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var prev sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT max(seq) FROM rosters`).Scan(&prev); err != nil {
			return err
		}
		if prev.Valid && r.Seq <= uint64(prev.Int64) {
			return fmt.Errorf("sequence %d is not above the last sent, %d", r.Seq, prev.Int64)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO rosters (seq, body, sig, content, sent_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)`,
			r.Seq, r.Body, r.Sig, r.Content, formatTime(r.Sent), formatTime(r.Expires)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM rosters WHERE seq <= ?`, int64(r.Seq)-rostersKept)
		return err
	})
	if err != nil {
		return fmt.Errorf("record roster %d: %w", r.Seq, err)
	}
	return nil
}

// LastRosterSeq is the sequence of the roster recorded last, read without
// its body; ErrNotFound when none was.
func (db *rosters) LastRosterSeq(ctx context.Context) (uint64, error) {
	var seq uint64
	err := db.sql.QueryRowContext(ctx, `SELECT seq FROM rosters ORDER BY seq DESC LIMIT 1`).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("read the last roster's sequence: %w", ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("read the last roster's sequence: %w", err)
	}
	return seq, nil
}

// LastRoster returns the roster in force, the last recorded, or an error
// wrapping ErrNotFound if none was ever sent.
func (db *rosters) LastRoster(ctx context.Context) (Roster, error) {
	var r Roster
	var sent, expires string
	err := db.sql.QueryRowContext(ctx, `SELECT seq, body, sig, content, sent_at, expires_at FROM rosters ORDER BY seq DESC LIMIT 1`).
		Scan(&r.Seq, &r.Body, &r.Sig, &r.Content, &sent, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return Roster{}, fmt.Errorf("read the last roster: %w", ErrNotFound)
	}
	if err != nil {
		return Roster{}, fmt.Errorf("read the last roster: %w", err)
	}
	if r.Sent, err = parseTime(sent); err != nil {
		return Roster{}, fmt.Errorf("read the last roster: %w", err)
	}
	if r.Expires, err = parseTime(expires); err != nil {
		return Roster{}, fmt.Errorf("read the last roster: %w", err)
	}
	return r, nil
}
