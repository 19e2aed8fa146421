package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// checkSeq refuses a sequence SQLite cannot keep: its integers are signed
// 64-bit, and the driver refuses a uint64 with the high bit set.
func checkSeq(seq uint64) error {
	if seq > math.MaxInt64 {
		return fmt.Errorf("sequence %d is above 2^63-1, the largest the store keeps", seq)
	}
	return nil
}

// Declaration is the last declaration sent to a node: its exact signed
// bytes and signature, and the digest of what it holds.
type Declaration struct {
	Node string
	Seq  uint64
	Body []byte
	Sig  []byte
	// Content is the digest of what the declaration holds, without its
	// sequence and times, as the controller computed it when it sent it;
	// "" for one recorded before the store kept it.
	Content string
	Sent    time.Time
	Expires time.Time
}

// RecordDeclaration records d as the last sent to its node. A sequence not
// above the one recorded is refused: sequences only go up.
func (db *DB) RecordDeclaration(ctx context.Context, d Declaration) error {
	if err := checkSeq(d.Seq); err != nil {
		return fmt.Errorf("record declaration of node %q: %w", d.Node, err)
	}
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var prev uint64
		err := tx.QueryRowContext(ctx, `SELECT seq FROM declarations WHERE node = ?`, d.Node).Scan(&prev)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err == nil && d.Seq <= prev {
			return fmt.Errorf("sequence %d is not above the last sent, %d", d.Seq, prev)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO declarations (node, seq, body, sig, content, sent_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (node) DO UPDATE SET seq = excluded.seq, body = excluded.body, sig = excluded.sig,
			content = excluded.content, sent_at = excluded.sent_at, expires_at = excluded.expires_at`,
			d.Node, d.Seq, d.Body, d.Sig, d.Content, formatTime(d.Sent), formatTime(d.Expires))
		return err
	})
	if err != nil {
		return fmt.Errorf("record declaration %d of node %q: %w", d.Seq, d.Node, err)
	}
	return nil
}

// LastDeclaration returns the last declaration sent to node, or an error
// wrapping ErrNotFound if none was.
func (db *DB) LastDeclaration(ctx context.Context, node string) (Declaration, error) {
	d := Declaration{Node: node}
	var sent, expires string
	err := db.sql.QueryRowContext(ctx, `SELECT seq, body, sig, content, sent_at, expires_at FROM declarations WHERE node = ?`, node).
		Scan(&d.Seq, &d.Body, &d.Sig, &d.Content, &sent, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return Declaration{}, fmt.Errorf("read last declaration of node %q: %w", node, ErrNotFound)
	}
	if err != nil {
		return Declaration{}, fmt.Errorf("read last declaration of node %q: %w", node, err)
	}
	if d.Sent, err = parseTime(sent); err != nil {
		return Declaration{}, fmt.Errorf("read last declaration of node %q: %w", node, err)
	}
	if d.Expires, err = parseTime(expires); err != nil {
		return Declaration{}, fmt.Errorf("read last declaration of node %q: %w", node, err)
	}
	return d, nil
}

// LastReceived returns the body of the last declaration node reported
// applying, or an error wrapping ErrNotFound if it never applied one.
func (db *DB) LastReceived(ctx context.Context, node string) ([]byte, error) {
	var body []byte
	err := db.sql.QueryRowContext(ctx, `SELECT received_body FROM declarations WHERE node = ? AND received_body IS NOT NULL`, node).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("read the last declaration node %q received: %w", node, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read the last declaration node %q received: %w", node, err)
	}
	return body, nil
}

// Report is a node's last report, as it sent it.
type Report struct {
	Node     string
	Seq      uint64
	Body     []byte
	Received time.Time
}

// RecordReport keeps node's report, and when applied is set, the sequence it
// applied.
func (db *DB) RecordReport(ctx context.Context, r Report, applied bool) error {
	if err := checkSeq(r.Seq); err != nil {
		return fmt.Errorf("record report of node %q: %w", r.Node, err)
	}
	err := db.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO reports (node, seq, body, received_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (node) DO UPDATE SET seq = excluded.seq, body = excluded.body, received_at = excluded.received_at`,
			r.Node, r.Seq, string(r.Body), formatTime(r.Received)); err != nil {
			return err
		}
		if applied {
			if _, err := tx.ExecContext(ctx, `UPDATE nodes SET applied_seq = max(applied_seq, ?) WHERE name = ?`, r.Seq, r.Node); err != nil {
				return err
			}
			// What it applied is what it now serves.
			if _, err := tx.ExecContext(ctx, `UPDATE declarations SET received_seq = seq, received_body = body
				WHERE node = ? AND seq = ? AND received_seq < seq`, r.Node, r.Seq); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record report of node %q: %w", r.Node, err)
	}
	return nil
}

// LastReport returns node's last report, or an error wrapping ErrNotFound.
func (db *DB) LastReport(ctx context.Context, node string) (Report, error) {
	r := Report{Node: node}
	var body, at string
	err := db.sql.QueryRowContext(ctx, `SELECT seq, body, received_at FROM reports WHERE node = ?`, node).Scan(&r.Seq, &body, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Report{}, fmt.Errorf("read last report of node %q: %w", node, ErrNotFound)
	}
	if err != nil {
		return Report{}, fmt.Errorf("read last report of node %q: %w", node, err)
	}
	r.Body = []byte(body)
	if r.Received, err = parseTime(at); err != nil {
		return Report{}, fmt.Errorf("read last report of node %q: %w", node, err)
	}
	return r, nil
}
