package store

import (
	"context"
	"database/sql"
	"encoding/json"
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

// RecordDeclaration records d as the last sent to its node, as
// RecordDeclarations does for one: a sequence not above the one recorded
// is refused (sequences only go up).
func (db *DB) RecordDeclaration(ctx context.Context, d Declaration) error {
	failed, err := db.RecordDeclarations(ctx, []Declaration{d})
	if err != nil {
		return err
	}
	return failed[d.Node]
}

// RecordDeclarations records each of ds as the last sent to its node, in
// one transaction (one sync to the disk for a push to every node). As
// RecordDeclaration does, a sequence not above the one recorded for its
// node is refused: that declaration is its node's failure, in failed, and
// the others are recorded. err is a failure of the whole: nothing was
// recorded. Two of ds for one node are taken in order (the second must be
// above the first).
func (db *DB) RecordDeclarations(ctx context.Context, ds []Declaration) (failed map[string]error, err error) {
	err = db.tx(ctx, func(tx *sql.Tx) error {
		failed = map[string]error{}
		prev, err := tx.PrepareContext(ctx, `SELECT seq FROM declarations WHERE node = ?`)
		if err != nil {
			return err
		}
		defer prev.Close()
		put, err := tx.PrepareContext(ctx, `INSERT INTO declarations (node, seq, body, sig, content, sent_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (node) DO UPDATE SET seq = excluded.seq, body = excluded.body, sig = excluded.sig,
			content = excluded.content, sent_at = excluded.sent_at, expires_at = excluded.expires_at`)
		if err != nil {
			return err
		}
		defer put.Close()
		for _, d := range ds {
			if err := checkSeq(d.Seq); err != nil {
				failed[d.Node] = fmt.Errorf("record declaration of node %q: %w", d.Node, err)
				continue
			}
			var last uint64
			err := prev.QueryRowContext(ctx, d.Node).Scan(&last)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err == nil && d.Seq <= last {
				failed[d.Node] = fmt.Errorf("record declaration %d of node %q: sequence %d is not above the last sent, %d", d.Seq, d.Node, d.Seq, last)
				continue
			}
			if _, err := put.ExecContext(ctx, d.Node, d.Seq, d.Body, d.Sig, d.Content, formatTime(d.Sent), formatTime(d.Expires)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record %d declarations: %w", len(ds), err)
	}
	return failed, nil
}

// DeclarationHeads returns what was last sent to each of nodes that was
// sent one, by node, without its body: its sequence, content digest and
// times (Body is nil, but for a row recorded before the store kept
// digests, whose body is read so its content can be worked out). A node
// sent nothing is not in the map; a read that failed is an error.
func (db *DB) DeclarationHeads(ctx context.Context, nodes []string) (map[string]Declaration, error) {
	names, err := json.Marshal(nodes)
	if err != nil {
		return nil, fmt.Errorf("read the last declarations of %d nodes: %w", len(nodes), err)
	}
	// From the index declaration_heads alone, which holds every column
	// named here: the rows' bodies are not read. The body of a row that
	// has no content digest (recorded before the store kept one) is read
	// after, on its own.
	rows, err := db.sql.QueryContext(ctx, `SELECT node, seq, sig, content, sent_at, expires_at
		FROM declarations INDEXED BY declaration_heads WHERE node IN (SELECT value FROM json_each(?))`, string(names))
	if err != nil {
		return nil, fmt.Errorf("read the last declarations of %d nodes: %w", len(nodes), err)
	}
	defer rows.Close()
	out := make(map[string]Declaration, len(nodes))
	for rows.Next() {
		var d Declaration
		var sent, expires string
		if err := rows.Scan(&d.Node, &d.Seq, &d.Sig, &d.Content, &sent, &expires); err != nil {
			return nil, fmt.Errorf("read the last declarations of %d nodes: %w", len(nodes), err)
		}
		if d.Sent, err = parseTime(sent); err != nil {
			return nil, fmt.Errorf("read the last declaration of node %q: %w", d.Node, err)
		}
		if d.Expires, err = parseTime(expires); err != nil {
			return nil, fmt.Errorf("read the last declaration of node %q: %w", d.Node, err)
		}
		out[d.Node] = d
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the last declarations of %d nodes: %w", len(nodes), err)
	}
	rows.Close()
	for node, d := range out {
		if d.Content != "" {
			continue
		}
		err := db.sql.QueryRowContext(ctx, `SELECT body FROM declarations WHERE node = ?`, node).Scan(&d.Body)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			delete(out, node) // removed since the first read: nothing sent to it now
		case err != nil:
			return nil, fmt.Errorf("read the last declaration of node %q: %w", node, err)
		default:
			out[node] = d
		}
	}
	return out, nil
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
// applied, as RecordReports does for one: a node the store does not hold
// is an error wrapping ErrNotFound.
func (db *DB) RecordReport(ctx context.Context, r Report, applied bool) error {
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
func (db *DB) RecordReports(ctx context.Context, rs []ReportRecord) (failed map[int]error, err error) {
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
func (db *DB) FailedReports(ctx context.Context) (map[string]uint64, error) {
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
