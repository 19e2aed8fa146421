package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// Roll is a roll of a release over nodes, as the store keeps it.
type Roll struct {
	ID            int64
	Digest        string
	HealthyWithin time.Duration
	State         string // spec.RollRunning, ...
	Cause         string
	Started       time.Time
	Ended         time.Time // zero while running or halted
	Nodes         []RollNode
}

// RollNode is one node of a roll, at its position.
type RollNode struct {
	Position int
	Node     string
	State    string // spec.RollPending, ...
	Cause    string
	Started  time.Time // zero until sent
	Ended    time.Time // zero until healthy, failed or skipped
}

// ErrRollActive is a roll begun, resumed or aborted against the one
// running or halted (or none).
var ErrRollActive = errors.New("a roll is running or halted")

// rolls are the rolls of a release across the mesh, and each node's binary.
type rolls struct{ *core }

// StartRoll records r (its nodes pending, running from r.Started) and
// returns it numbered. A roll running or halted already is ErrRollActive,
// returned with that roll; nothing changes.
func (db *rolls) StartRoll(ctx context.Context, r Roll) (Roll, error) {
	var active Roll
	err := db.tx(ctx, func(tx *sql.Tx) error {
		a, err := activeRoll(ctx, tx)
		if err == nil {
			active = a
			return ErrRollActive
		}
		if !errors.Is(err, ErrNotFound) {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO rolls (digest, healthy_within_ms, state, started_at) VALUES (?, ?, ?, ?)`,
			r.Digest, r.HealthyWithin.Milliseconds(), spec.RollRunning, formatTime(r.Started))
		if err != nil {
			return err
		}
		if r.ID, err = res.LastInsertId(); err != nil {
			return err
		}
		r.State = spec.RollRunning
		for i := range r.Nodes {
			r.Nodes[i].Position, r.Nodes[i].State = i, spec.RollPending
			if _, err := tx.ExecContext(ctx, `INSERT INTO roll_nodes (roll, position, node, state) VALUES (?, ?, ?, ?)`,
				r.ID, i, r.Nodes[i].Node, spec.RollPending); err != nil {
				return err
			}
		}
		return nil
	})
	if errors.Is(err, ErrRollActive) {
		return active, fmt.Errorf("start a roll of %s: %w", r.Digest, ErrRollActive)
	}
	if err != nil {
		return Roll{}, fmt.Errorf("start a roll of %s: %w", r.Digest, err)
	}
	return r, nil
}

// ActiveRoll is the roll running or halted, or an error wrapping
// ErrNotFound.
func (db *rolls) ActiveRoll(ctx context.Context) (Roll, error) {
	// Read outside a transaction: the roll loop reads it four times a
	// second, and a transaction here takes the store's write lock.
	r, err := activeRoll(ctx, db.sql)
	if err != nil {
		return Roll{}, fmt.Errorf("read the active roll: %w", err)
	}
	return r, nil
}

// RollByID is the roll numbered id (0: the latest), or an error wrapping
// ErrNotFound.
func (db *rolls) RollByID(ctx context.Context, id int64) (Roll, error) {
	q := `SELECT ` + rollColumns + ` FROM rolls WHERE id = ?`
	args := []any{id}
	if id == 0 {
		q, args = `SELECT `+rollColumns+` FROM rolls ORDER BY id DESC LIMIT 1`, nil
	}
	r, err := readRoll(ctx, db.sql, db.sql.QueryRowContext(ctx, q, args...))
	if err != nil {
		return Roll{}, fmt.Errorf("read roll %d: %w", id, err)
	}
	return r, nil
}

// BeginRollStep marks the node at position of roll sending from at, and
// records that its declarations carry the roll's release from now on: one
// transaction, so a restart never finds the one without the other.
func (db *rolls) BeginRollStep(ctx context.Context, roll int64, position int, at time.Time) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var node, digest, state string
		if err := tx.QueryRowContext(ctx, `SELECT rn.node, r.digest, r.state FROM roll_nodes rn JOIN rolls r ON r.id = rn.roll WHERE rn.roll = ? AND rn.position = ?`,
			roll, position).Scan(&node, &digest, &state); err != nil {
			return notFound(err)
		}
		if state != spec.RollRunning {
			return fmt.Errorf("the roll is %s: %w", state, ErrRollActive)
		}
		// What it carried before, kept once: a step sent again (resumed)
		// finds its own release there.
		if _, err := tx.ExecContext(ctx, `UPDATE roll_nodes SET state = ?, cause = '', started_at = ?, ended_at = NULL,
			previous = CASE WHEN kept = 1 THEN previous ELSE (SELECT digest FROM node_binaries WHERE node = ?) END, kept = 1
			WHERE roll = ? AND position = ?`, spec.RollSending, formatTime(at), node, roll, position); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO node_binaries (node, digest) VALUES (?, ?) ON CONFLICT (node) DO UPDATE SET digest = excluded.digest,
			retry = CASE WHEN node_binaries.digest = excluded.digest THEN node_binaries.retry ELSE 0 END`, node, digest)
		return err
	})
	if err != nil {
		return fmt.Errorf("begin roll %d at position %d: %w", roll, position, err)
	}
	return nil
}

// EndRollStep records the node at position of roll state (healthy, failed
// or skipped) at, with cause. A failed node halts the roll with cause.
func (db *rolls) EndRollStep(ctx context.Context, roll int64, position int, state, cause string, at time.Time) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE roll_nodes SET state = ?, cause = ?, ended_at = ? WHERE roll = ? AND position = ?`,
			state, cause, formatTime(at), roll, position)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		if state == spec.RollFailed {
			_, err = tx.ExecContext(ctx, `UPDATE rolls SET state = ?, cause = ? WHERE id = ? AND state = ?`, spec.RollHalted, cause, roll, spec.RollRunning)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("end roll %d at position %d: %w", roll, position, err)
	}
	return nil
}

// FinishRoll records roll done at at, if it is running.
func (db *rolls) FinishRoll(ctx context.Context, roll int64, at time.Time) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE rolls SET state = ?, ended_at = ? WHERE id = ? AND state = ?`, spec.RollDone, formatTime(at), roll, spec.RollRunning)
		return err
	})
	if err != nil {
		return fmt.Errorf("finish roll %d: %w", roll, err)
	}
	return nil
}

// ResumeRoll runs the halted roll again: its failed nodes are pending
// again, and those of them named in retry (whose launchers gave up on the
// release) are asked to try it again: their binary's retry count goes up.
// No roll halted is ErrRollActive wrapped with what there is.
func (db *rolls) ResumeRoll(ctx context.Context, retry []string) (Roll, error) {
	return db.changeActive(ctx, "resume", func(tx *sql.Tx, r Roll) error {
		if r.State != spec.RollHalted {
			return fmt.Errorf("roll %d is %s, not halted: %w", r.ID, r.State, ErrRollActive)
		}
		// A node that failed because its launcher gave up on the release
		// is asked to try it again: it would not run it otherwise.
		for _, node := range retry {
			if _, err := tx.ExecContext(ctx, `UPDATE node_binaries SET retry = retry + 1
				WHERE node = ? AND digest = ? AND node IN (SELECT node FROM roll_nodes WHERE roll = ? AND state = ?)`, node, r.Digest, r.ID, spec.RollFailed); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `UPDATE roll_nodes SET state = ?, cause = '', started_at = NULL, ended_at = NULL WHERE roll = ? AND state = ?`,
			spec.RollPending, r.ID, spec.RollFailed); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE rolls SET state = ?, cause = '' WHERE id = ?`, spec.RollRunning, r.ID)
		return err
	})
}

// AbortRoll ends the running or halted roll at at: its nodes not yet sent
// stay pending, and are never sent; a node sent the release that did not
// report it healthy (failed, or sending) carries again what it carried
// before the roll, in the same write. Reverted names those nodes.
func (db *rolls) AbortRoll(ctx context.Context, at time.Time) (r Roll, reverted []string, err error) {
	r, err = db.changeActive(ctx, "abort", func(tx *sql.Tx, r Roll) error {
		rows, err := tx.QueryContext(ctx, `SELECT node, previous FROM roll_nodes WHERE roll = ? AND kept = 1 AND state IN (?, ?) ORDER BY position`,
			r.ID, spec.RollFailed, spec.RollSending)
		if err != nil {
			return err
		}
		type back struct {
			node     string
			previous sql.NullString
		}
		var backs []back
		for rows.Next() {
			var b back
			if err := rows.Scan(&b.node, &b.previous); err != nil {
				rows.Close()
				return err
			}
			backs = append(backs, b)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, b := range backs {
			if b.previous.Valid {
				_, err = tx.ExecContext(ctx, `INSERT INTO node_binaries (node, digest) SELECT ?, ? WHERE EXISTS (SELECT 1 FROM nodes WHERE name = ?)
					ON CONFLICT (node) DO UPDATE SET digest = excluded.digest,
					retry = CASE WHEN node_binaries.digest = excluded.digest THEN node_binaries.retry ELSE 0 END`, b.node, b.previous.String, b.node)
			} else {
				_, err = tx.ExecContext(ctx, `DELETE FROM node_binaries WHERE node = ?`, b.node)
			}
			if err != nil {
				return err
			}
			reverted = append(reverted, b.node)
		}
		_, err = tx.ExecContext(ctx, `UPDATE rolls SET state = ?, ended_at = ? WHERE id = ?`, spec.RollAborted, formatTime(at), r.ID)
		return err
	})
	return r, reverted, err
}

// changeActive changes the active roll by change, and returns it as it is
// then. No active roll is an error wrapping ErrNotFound.
func (db *rolls) changeActive(ctx context.Context, what string, change func(*sql.Tx, Roll) error) (Roll, error) {
	var out Roll
	err := db.tx(ctx, func(tx *sql.Tx) error {
		r, err := activeRoll(ctx, tx)
		if err != nil {
			return err
		}
		if err := change(tx, r); err != nil {
			return err
		}
		out, err = readRoll(ctx, tx, tx.QueryRowContext(ctx, `SELECT `+rollColumns+` FROM rolls WHERE id = ?`, r.ID))
		return err
	})
	if err != nil {
		return Roll{}, fmt.Errorf("%s the roll: %w", what, err)
	}
	return out, nil
}

// NodeBinaries are the releases the nodes' declarations carry, by node.
func (db *rolls) NodeBinaries(ctx context.Context) (map[string]Release, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT nb.node, nb.retry, `+prefixed("r.", releaseColumns)+` FROM node_binaries nb JOIN releases r ON r.digest = nb.digest`)
	if err != nil {
		return nil, fmt.Errorf("read the nodes' binaries: %w", err)
	}
	defer rows.Close()
	out := map[string]Release{}
	for rows.Next() {
		var node string
		var retry int
		r, err := scanRelease(prepend{[]any{&node, &retry}, rows})
		if err != nil {
			return nil, fmt.Errorf("read the nodes' binaries: %w", err)
		}
		r.Retry = retry
		out[node] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the nodes' binaries: %w", err)
	}
	return out, nil
}

// prepend scans its first column into first, the rest as row would.
type prepend struct {
	first []any
	row   interface{ Scan(...any) error }
}

func (p prepend) Scan(dest ...any) error {
	return p.row.Scan(append(append([]any(nil), p.first...), dest...)...)
}

// prefixed is columns, each prefixed with p.
func prefixed(p, columns string) string {
	parts := strings.Split(columns, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

const rollColumns = `id, digest, healthy_within_ms, state, cause, started_at, ended_at`

// querier is what reads: the store, or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// activeRoll is the roll running or halted, or ErrNotFound.
func activeRoll(ctx context.Context, tx querier) (Roll, error) {
	return readRoll(ctx, tx, tx.QueryRowContext(ctx, `SELECT `+rollColumns+` FROM rolls WHERE state IN (?, ?) ORDER BY id DESC LIMIT 1`,
		spec.RollRunning, spec.RollHalted))
}

// readRoll scans a roll from row and reads its nodes (a read outside a
// transaction may find a node's step a moment newer than the roll's row:
// the next read sees both).
func readRoll(ctx context.Context, tx querier, row *sql.Row) (Roll, error) {
	var r Roll
	var ms int64
	var started string
	var ended sql.NullString
	if err := row.Scan(&r.ID, &r.Digest, &ms, &r.State, &r.Cause, &started, &ended); err != nil {
		return Roll{}, notFound(err)
	}
	r.HealthyWithin = time.Duration(ms) * time.Millisecond
	var err error
	if r.Started, err = parseTime(started); err != nil {
		return Roll{}, fmt.Errorf("roll %d: started_at: %w", r.ID, err)
	}
	if r.Ended, err = nullTime(ended); err != nil {
		return Roll{}, fmt.Errorf("roll %d: ended_at: %w", r.ID, err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT position, node, state, cause, started_at, ended_at FROM roll_nodes WHERE roll = ? ORDER BY position`, r.ID)
	if err != nil {
		return Roll{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var n RollNode
		var s, e sql.NullString
		if err := rows.Scan(&n.Position, &n.Node, &n.State, &n.Cause, &s, &e); err != nil {
			return Roll{}, err
		}
		if n.Started, err = nullTime(s); err != nil {
			return Roll{}, fmt.Errorf("roll %d, node %q: %w", r.ID, n.Node, err)
		}
		if n.Ended, err = nullTime(e); err != nil {
			return Roll{}, fmt.Errorf("roll %d, node %q: %w", r.ID, n.Node, err)
		}
		r.Nodes = append(r.Nodes, n)
	}
	return r, rows.Err()
}

// nullTime is the time s holds, zero when NULL.
func nullTime(s sql.NullString) (time.Time, error) {
	if !s.Valid {
		return time.Time{}, nil
	}
	return parseTime(s.String)
}

// notFound is err, ErrNotFound when it says no row.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// NodeBinary is the release node's declarations carry, or an error
// wrapping ErrNotFound when they carry none.
func (db *rolls) NodeBinary(ctx context.Context, node string) (Release, error) {
	var retry int
	r, err := scanRelease(prepend{[]any{&retry}, db.sql.QueryRowContext(ctx, `SELECT nb.retry, `+prefixed("r.", releaseColumns)+` FROM node_binaries nb JOIN releases r ON r.digest = nb.digest WHERE nb.node = ?`, node)})
	if err != nil {
		return Release{}, fmt.Errorf("read node %q's binary: %w", node, notFound(err))
	}
	r.Retry = retry
	return r, nil
}
