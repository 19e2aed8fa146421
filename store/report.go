package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Report is a node's last report, as it sent it.
type Report struct {
	Node     string
	Seq      uint64
	Body     []byte
	Received time.Time
}

// reports are each node's last report.
type reports struct{ *core }

// RecordReport keeps node's report, and when applied is set, the sequence it
// applied, as RecordReports does for one: a node the store does not hold
// is an error wrapping ErrNotFound.
func (db *reports) RecordReport(ctx context.Context, r Report, applied bool) error {
	failed, err := db.RecordReports(ctx, []ReportRecord{{Report: r, Applied: applied}})
	if err != nil {
		return err
	}
	return failed[0]
}

// ReportRecord is a report to record, and whether the node applied the
// declaration it reports on.
type ReportRecord struct {
	Report
	Applied bool
	// Failed says that the report's apply failed a resource, or refused
	// the declaration: FailedReports names the node until a report that
	// did not fail replaces it.
	Failed bool
}

// RecordReports records rs in one transaction, each as RecordReport
// would, in order. A report that cannot be recorded (its node is gone,
// its sequence does not fit) is its own failure, in failed by its index
// in rs; the others are recorded. err is a failure of the whole: nothing
// was recorded.
func (db *reports) RecordReports(ctx context.Context, rs []ReportRecord) (failed map[int]error, err error) {
	err = db.tx(ctx, func(tx *sql.Tx) error {
		failed = map[int]error{}
		put, err := tx.PrepareContext(ctx, `INSERT INTO reports (node, seq, body, received_at, failed) SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM nodes WHERE name = ?1)
			ON CONFLICT (node) DO UPDATE SET seq = excluded.seq, body = excluded.body, received_at = excluded.received_at, failed = excluded.failed`)
		if err != nil {
			return err
		}
		defer put.Close()
		applied, err := tx.PrepareContext(ctx, `UPDATE nodes SET applied_seq = max(applied_seq, ?) WHERE name = ?`)
		if err != nil {
			return err
		}
		defer applied.Close()
		received, err := tx.PrepareContext(ctx, `UPDATE declarations SET received_seq = seq, received_body = body
			WHERE node = ? AND seq = ? AND received_seq < seq`)
		if err != nil {
			return err
		}
		defer received.Close()
		for i, r := range rs {
			if err := checkSeq(r.Seq); err != nil {
				failed[i] = fmt.Errorf("record report of node %q: %w", r.Node, err)
				continue
			}
			res, err := put.ExecContext(ctx, r.Node, r.Seq, string(r.Body), formatTime(r.Received), r.Failed)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				failed[i] = fmt.Errorf("record report of node %q: %w", r.Node, ErrNotFound)
				continue
			}
			if !r.Applied {
				continue
			}
			if _, err := applied.ExecContext(ctx, r.Seq, r.Node); err != nil {
				return err
			}
			// What it applied is what it now serves.
			if _, err := received.ExecContext(ctx, r.Node, r.Seq); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record %d reports: %w", len(rs), err)
	}
	return failed, nil
}

// FailedReports names each node whose last report failed, with that
// report's sequence: read from an index of those alone, so a push to every
// node reads as many rows as there are failures.
func (db *reports) FailedReports(ctx context.Context) (map[string]uint64, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT node, seq FROM reports INDEXED BY reports_failed WHERE failed = 1`)
	if err != nil {
		return nil, fmt.Errorf("read the failed reports: %w", err)
	}
	defer rows.Close()
	out := map[string]uint64{}
	for rows.Next() {
		var node string
		var seq uint64
		if err := rows.Scan(&node, &seq); err != nil {
			return nil, fmt.Errorf("read the failed reports: %w", err)
		}
		out[node] = seq
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the failed reports: %w", err)
	}
	return out, nil
}

// LastReport returns node's last report, or an error wrapping ErrNotFound.
func (db *reports) LastReport(ctx context.Context, node string) (Report, error) {
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
