package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// Node is a node as the store keeps it.
type Node struct {
	Name    string
	Address string
	NKey    string // the public key of the node's bus credential
	// SealKey is the public half of the sealing key the node made when it
	// joined ("x25519:" and base64url); empty if it made none.
	SealKey     string
	Joined      time.Time
	LastHeard   time.Time // zero if never heard
	HostVersion string
	Protocol    int
	AppliedSeq  uint64
	Facts       *spec.Facts // nil if none received
	Held        time.Time   // zero unless held
	HeldReason  string
	Removing    time.Time // zero unless its removal began and has not finished
	// Heartbeat is how often the node said it sends a heartbeat; zero if
	// its heartbeats do not say.
	Heartbeat time.Duration
	// Fallbacks are the versions its launcher gave up on, as its last
	// heartbeat reported them.
	Fallbacks []spec.Fallback
	// RosterSeq is the roster message its heartbeats said it holds; zero
	// until one says.
	RosterSeq uint64
	// WGKey is the node's WireGuard public key (standard base64); empty
	// if it made none.
	WGKey string
	// OverlayIP is the node's overlay address; empty while the overlay is
	// off or the node has no WireGuard key.
	OverlayIP string
	// Endpoints, Relay and OverlayMode are what its host last reported of
	// its overlay (RecordOverlayState): where its WireGuard listens,
	// whether it relays, and whether the kernel or userspace runs it.
	Endpoints   []string
	Relay       bool
	OverlayMode string
}

// nodes are the machines of the mesh: their keys, heartbeats, facts, holds
// and removal.
type nodes struct{ *core }

// AddNode records a new node. A node of that name already present is refused.
func (db *nodes) AddNode(ctx context.Context, n Node) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO nodes (name, address, nkey, seal_key, wg_key, joined_at) VALUES (?, ?, ?, ?, ?, ?)`,
			n.Name, n.Address, n.NKey, n.SealKey, n.WGKey, formatTime(n.Joined))
		if err != nil {
			return err
		}
		_, err = allocateOverlay(ctx, tx, n.Name)
		return err
	})
	if err != nil {
		return fmt.Errorf("record node %q: %w", n.Name, err)
	}
	return nil
}

// RecordHeartbeat records that node was heard at, with what its heartbeat
// says, its interval included (a heartbeat that does not say records zero).
func (db *nodes) RecordHeartbeat(ctx context.Context, hb spec.Heartbeat, at time.Time) error {
	if err := checkSeq(max(hb.AppliedSeq, hb.RosterSeq)); err != nil {
		return fmt.Errorf("record heartbeat of node %q: %w", hb.Node, err)
	}
	interval := max(hb.IntervalMS, 0)
	return db.updateNode(ctx, hb.Node, "record heartbeat of node %q: %w",
		`UPDATE nodes SET last_heard = ?, host_version = ?, protocol = ?, applied_seq = ?, heartbeat_ms = ?, fallbacks = ?, roster_seq = ? WHERE name = ?`,
		formatTime(at), hb.HostVersion, hb.Protocol, hb.AppliedSeq, interval, fallbacksColumn(hb.Fallbacks), hb.RosterSeq, hb.Node)
}

// RecordHeartbeats records a batch of heartbeats, one node's each, in one
// transaction, their intervals included as RecordHeartbeat does. A heartbeat that cannot be recorded (its node is gone, its
// sequence does not fit) is that node's, in failed; the others are written.
func (db *nodes) RecordHeartbeats(ctx context.Context, hbs []spec.Heartbeat, at time.Time) (failed map[string]error, err error) {
	err = db.tx(ctx, func(tx *sql.Tx) error {
		failed = map[string]error{}
		stmt, err := tx.PrepareContext(ctx, `UPDATE nodes SET last_heard = ?, host_version = ?, protocol = ?, applied_seq = ?, heartbeat_ms = ?, fallbacks = ?, roster_seq = ? WHERE name = ?`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, hb := range hbs {
			if err := checkSeq(max(hb.AppliedSeq, hb.RosterSeq)); err != nil {
				failed[hb.Node] = fmt.Errorf("record heartbeat of node %q: %w", hb.Node, err)
				continue
			}
			res, err := stmt.ExecContext(ctx, formatTime(at), hb.HostVersion, hb.Protocol, hb.AppliedSeq, max(hb.IntervalMS, 0), fallbacksColumn(hb.Fallbacks), hb.RosterSeq, hb.Node)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				failed[hb.Node] = fmt.Errorf("record heartbeat of node %q: %w", hb.Node, ErrNotFound)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("record %d heartbeats: %w", len(hbs), err)
	}
	return failed, nil
}

// RecordFacts records what node reported about its machine.
func (db *nodes) RecordFacts(ctx context.Context, f spec.Facts, at time.Time) error {
	body, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("record facts of node %q: %w", f.Node, err)
	}
	return db.updateNode(ctx, f.Node, "record facts of node %q: %w",
		`UPDATE nodes SET facts = ?, facts_at = ? WHERE name = ?`, string(body), formatTime(at), f.Node)
}

func (db *nodes) updateNode(ctx context.Context, node, format, query string, args ...any) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf(format, node, err)
	}
	return nil
}

const nodeColumns = `name, address, nkey, seal_key, joined_at, last_heard, host_version, protocol, applied_seq, facts, held_at, held_reason, removing_at, heartbeat_ms, fallbacks, roster_seq, wg_key, overlay_ip, overlay_endpoints, overlay_relay, overlay_mode`

// fallbacksColumn is fallbacks as the nodes table keeps them: JSON, ""
// for none.
func fallbacksColumn(fallbacks []spec.Fallback) string {
	if len(fallbacks) == 0 {
		return ""
	}
	b, _ := json.Marshal(fallbacks)
	return string(b)
}

func scanNode(row interface{ Scan(...any) error }) (Node, error) {
	var n Node
	var joined string
	var heard, facts, held, removing sql.NullString
	var heartbeatMS int64
	var fallbacks, endpoints string
	if err := row.Scan(&n.Name, &n.Address, &n.NKey, &n.SealKey, &joined, &heard, &n.HostVersion, &n.Protocol, &n.AppliedSeq, &facts, &held, &n.HeldReason, &removing, &heartbeatMS, &fallbacks, &n.RosterSeq,
		&n.WGKey, &n.OverlayIP, &endpoints, &n.Relay, &n.OverlayMode); err != nil {
		return Node{}, err
	}
	if endpoints != "" {
		if err := json.Unmarshal([]byte(endpoints), &n.Endpoints); err != nil {
			return Node{}, fmt.Errorf("overlay_endpoints: %w", err)
		}
	}
	if fallbacks != "" {
		if err := json.Unmarshal([]byte(fallbacks), &n.Fallbacks); err != nil {
			return Node{}, fmt.Errorf("fallbacks: %w", err)
		}
	}
	n.Heartbeat = time.Duration(heartbeatMS) * time.Millisecond
	if held.Valid {
		t, err := parseTime(held.String)
		if err != nil {
			return Node{}, fmt.Errorf("held_at: %w", err)
		}
		n.Held = t
	}
	if removing.Valid {
		t, err := parseTime(removing.String)
		if err != nil {
			return Node{}, fmt.Errorf("removing_at: %w", err)
		}
		n.Removing = t
	}
	var err error
	if n.Joined, err = parseTime(joined); err != nil {
		return Node{}, fmt.Errorf("joined_at: %w", err)
	}
	if heard.Valid {
		if n.LastHeard, err = parseTime(heard.String); err != nil {
			return Node{}, fmt.Errorf("last_heard: %w", err)
		}
	}
	if facts.Valid {
		n.Facts = new(spec.Facts)
		if err := json.Unmarshal([]byte(facts.String), n.Facts); err != nil {
			return Node{}, fmt.Errorf("facts: %w", err)
		}
	}
	return n, nil
}

// Hold holds node (at the time given, for reason), or releases it when at
// is zero. A missing node wraps ErrNotFound.
func (db *nodes) Hold(ctx context.Context, node string, at time.Time, reason string) error {
	var held any
	if !at.IsZero() {
		held = formatTime(at)
	} else {
		reason = ""
	}
	return db.updateNode(ctx, node, "hold node %q: %w", `UPDATE nodes SET held_at = ?, held_reason = ? WHERE name = ?`, held, reason, node)
}

// Node returns the node called name, or an error wrapping ErrNotFound.
func (db *nodes) Node(ctx context.Context, name string) (Node, error) {
	n, err := scanNode(db.sql.QueryRowContext(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Node{}, fmt.Errorf("read node %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Node{}, fmt.Errorf("read node %q: %w", name, err)
	}
	return n, nil
}

// NodeKey is a node's name and bus key, and whether its removal began:
// what the bus's users and the count of nodes need.
type NodeKey struct {
	Name     string
	NKey     string
	Removing bool
}

// NodeKeys returns every node's name and bus key, by name, without reading
// (and decoding) each node whole: the controller reads them at every token
// and join, so their cost grows with the fleet.
func (db *nodes) NodeKeys(ctx context.Context) ([]NodeKey, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT name, nkey, removing_at IS NOT NULL FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read nodes' keys: %w", err)
	}
	defer rows.Close()
	var ks []NodeKey
	for rows.Next() {
		var k NodeKey
		if err := rows.Scan(&k.Name, &k.NKey, &k.Removing); err != nil {
			return nil, fmt.Errorf("read nodes' keys: %w", err)
		}
		ks = append(ks, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read nodes' keys: %w", err)
	}
	return ks, nil
}

// NodeCount is how many nodes the store holds, those being removed
// among them, counted without reading them: the controller counts them at
// every token.
func (db *nodes) NodeCount(ctx context.Context) (int, error) {
	n, _, err := db.NodesLeaving(ctx)
	return n, err
}

// NodesLeaving is how many nodes the store holds and how many of them are
// being removed, counted without reading them: an assign says how many
// nodes a push composes.
func (db *nodes) NodesLeaving(ctx context.Context) (nodes, leaving int, err error) {
	if err := db.sql.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(removing_at) FROM nodes`).Scan(&nodes, &leaving); err != nil {
		return 0, 0, fmt.Errorf("count nodes: %w", err)
	}
	return nodes, leaving, nil
}

// NodesNamed returns the nodes of names that exist, by name, in one read:
// a name missing from the map is a node that does not exist; a read that
// failed is an error.
func (db *nodes) NodesNamed(ctx context.Context, names []string) (map[string]Node, error) {
	list, err := json.Marshal(names)
	if err != nil {
		return nil, fmt.Errorf("read %d nodes: %w", len(names), err)
	}
	rows, err := db.sql.QueryContext(ctx, `SELECT `+nodeColumns+` FROM nodes WHERE name IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, fmt.Errorf("read %d nodes: %w", len(names), err)
	}
	defer rows.Close()
	out := make(map[string]Node, len(names))
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("read %d nodes: %w", len(names), err)
		}
		out[n.Name] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %d nodes: %w", len(names), err)
	}
	return out, nil
}

// Nodes returns every node, by name.
func (db *nodes) Nodes(ctx context.Context) ([]Node, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT `+nodeColumns+` FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}
	defer rows.Close()
	var ns []Node
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("read nodes: %w", err)
		}
		ns = append(ns, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read nodes: %w", err)
	}
	return ns, nil
}

// BeginRemoval records that node name's removal began at the time given; a
// removal already begun keeps its first time. A missing node wraps
// ErrNotFound.
func (db *nodes) BeginRemoval(ctx context.Context, name string, at time.Time) error {
	return db.updateNode(ctx, name, "begin the removal of node %q: %w",
		`UPDATE nodes SET removing_at = coalesce(removing_at, ?) WHERE name = ?`, formatTime(at), name)
}

// RemoveNode deletes node name, and with it (ON DELETE CASCADE) its
// assignments, the last declaration sent to it and its last report. Its
// overlay address is released with the roster in force (see
// allocateOverlay). A missing node wraps ErrNotFound.
func (db *nodes) RemoveNode(ctx context.Context, name string) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		if err := releaseOverlay(ctx, tx, name); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM nodes WHERE name = ?`, name)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil {
			return err
		} else if k == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remove node %q: %w", name, err)
	}
	return nil
}
