package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

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

// declarations are the last declaration sent to each node.
type declarations struct{ *core }

// RecordDeclaration records d as the last sent to its node, as
// RecordDeclarations does for one: a sequence not above the one recorded
// is refused (sequences only go up).
func (db *declarations) RecordDeclaration(ctx context.Context, d Declaration) error {
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
func (db *declarations) RecordDeclarations(ctx context.Context, ds []Declaration) (failed map[string]error, err error) {
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
func (db *declarations) DeclarationHeads(ctx context.Context, nodes []string) (map[string]Declaration, error) {
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
func (db *declarations) LastDeclaration(ctx context.Context, node string) (Declaration, error) {
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
func (db *declarations) LastReceived(ctx context.Context, node string) ([]byte, error) {
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
