package store

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// Overlay is the overlay's range as the store keeps it; the zero Overlay
// is the overlay off.
type Overlay struct {
	CIDR    string
	Enabled time.Time
}

// On says whether the overlay is on.
func (o Overlay) On() bool { return o.CIDR != "" }

// OverlayReport is what a node's host last reported of its overlay, and
// when it was received.
type OverlayReport struct {
	State spec.OverlayState
	At    time.Time
}

// OverlayOnError refuses turning the overlay on with a range while it is
// on with another.
type OverlayOnError struct{ CIDR string }

func (e *OverlayOnError) Error() string {
	return fmt.Sprintf("the overlay is on with range %s", e.CIDR)
}

// overlays are the overlay's range, the addresses given from it and
// released, and what the hosts report of their overlay. The overlay's row
// stays while the overlay is off, its range empty, so that its counter
// (next_host) keeps rising across a disable and an enable.
type overlays struct{ *core }

// Overlay is the overlay's range while it is on, the zero Overlay while
// it is off; an error only when the store could not answer.
func (db *overlays) Overlay(ctx context.Context) (Overlay, error) {
	return readOverlay(ctx, db.sql)
}

func readOverlay(ctx context.Context, q querier) (Overlay, error) {
	var o Overlay
	var enabled string
	err := q.QueryRowContext(ctx, `SELECT cidr, enabled_at FROM overlay WHERE id = 1`).Scan(&o.CIDR, &enabled)
	if errors.Is(err, sql.ErrNoRows) {
		return Overlay{}, nil
	}
	if err != nil {
		return Overlay{}, fmt.Errorf("read the overlay: %w", err)
	}
	if !o.On() {
		return Overlay{}, nil
	}
	if o.Enabled, err = parseTime(enabled); err != nil {
		return Overlay{}, fmt.Errorf("read the overlay: enabled_at: %w", err)
	}
	return o, nil
}

// EnableOverlay turns the overlay on with range cidr and gives every node
// with a WireGuard key and no address one, in one transaction; it returns
// how many were given one. The counter goes on from where it was and the
// addresses released stay released, so no address given before a disable
// goes out again while a host may hold it. On already with cidr, it only
// gives the nodes that lack one theirs; on with another range, it refuses
// with an *OverlayOnError and changes nothing.
func (db *overlays) EnableOverlay(ctx context.Context, cidr netip.Prefix, at time.Time) (given int, err error) {
	err = db.tx(ctx, func(tx *sql.Tx) error {
		o, err := readOverlay(ctx, tx)
		if err != nil {
			return err
		}
		switch {
		case o.On() && o.CIDR != cidr.String():
			return &OverlayOnError{CIDR: o.CIDR}
		case !o.On():
			if _, err := tx.ExecContext(ctx, `INSERT INTO overlay (id, cidr, enabled_at, next_host) VALUES (1, ?, ?, 1)
				ON CONFLICT (id) DO UPDATE SET cidr = excluded.cidr, enabled_at = excluded.enabled_at`, cidr.String(), formatTime(at)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `UPDATE nodes SET overlay_ip = '' WHERE overlay_ip != ''`); err != nil {
				return err
			}
		}
		names, err := keyedWithout(ctx, tx)
		if err != nil {
			return err
		}
		// These nodes are not joining: each may hold a roster from
		// before a release.
		given, err = allocate(ctx, tx, names, nil)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("turn the overlay on with %s: %w", cidr, err)
	}
	return given, nil
}

// keyedWithout are the nodes with a WireGuard key, no overlay address and
// no removal begun, in the order they joined.
func keyedWithout(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT name FROM nodes WHERE wg_key != '' AND overlay_ip = '' AND removing_at IS NULL ORDER BY joined_at, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	return names, rows.Err()
}

// DisableOverlay turns the overlay off: its range and every node's
// address go, in one transaction. Each address is released with the
// roster in force, as a removal releases one, since a host that has not
// taken the next roster still holds it; the counter stays. It says
// whether the overlay was on.
func (db *overlays) DisableOverlay(ctx context.Context) (was bool, err error) {
	err = db.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE overlay SET cidr = '' WHERE id = 1 AND cidr != ''`)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		was = n > 0
		// Released when the roster in force was sent (the overlay's
		// enable time when none was): the last time a host was told it.
		if err := releaseOverlays(ctx, tx,
			`coalesce((SELECT sent_at FROM rosters ORDER BY seq DESC LIMIT 1), (SELECT enabled_at FROM overlay WHERE id = 1))`,
			`overlay_ip != ''`); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE nodes SET overlay_ip = '' WHERE overlay_ip != ''`)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("turn the overlay off: %w", err)
	}
	return was, nil
}

// allocateOverlay gives each of names (nodes with a WireGuard key) an
// overlay address, when the overlay is on, and returns how many it gave.
// Addresses are taken by a counter that only rises through the range,
// skipping its network and broadcast addresses and those in use; at the
// range's end it wraps. An address a removal released is given again
// only when the counter reaches it after wrapping AND every node holds a
// roster issued after the release: no host may still hold it as the
// removed node's. names are joining: they hold no roster yet. Called in
// the transaction that records the nodes.
func allocateOverlay(ctx context.Context, tx *sql.Tx, names ...string) (int, error) {
	return allocate(ctx, tx, names, names)
}

// allocate is allocateOverlay for names, of which joining hold no roster
// yet (the others' rosters count in the wait for a released address).
func allocate(ctx context.Context, tx *sql.Tx, names, joining []string) (int, error) {
	var cidr string
	var next int64
	err := tx.QueryRowContext(ctx, `SELECT cidr, next_host FROM overlay WHERE id = 1`).Scan(&cidr, &next)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the overlay: %w", err)
	}
	if cidr == "" {
		return 0, nil // off
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return 0, fmt.Errorf("overlay range %q: not an IPv4 network", cidr)
	}
	blocked, err := overlayBlocked(ctx, tx, joining)
	if err != nil {
		return 0, err
	}
	base := binary.BigEndian.Uint32(p.Addr().AsSlice())
	last := int64(1)<<(32-p.Bits()) - 2 // the highest host number; the next is the broadcast
	given := 0
	for _, name := range names {
		var key, ip string
		if err := tx.QueryRowContext(ctx, `SELECT wg_key, overlay_ip FROM nodes WHERE name = ?`, name).Scan(&key, &ip); err != nil {
			return given, fmt.Errorf("read node %q: %w", name, err)
		}
		if key == "" || ip != "" {
			continue
		}
		found := ""
		for tried := int64(0); tried < last; tried++ {
			if next < 1 || next > last {
				next = 1
			}
			h := next
			next++
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], base+uint32(h))
			cand := netip.AddrFrom4(b).String()
			if !blocked[cand] {
				found = cand
				break
			}
		}
		if found == "" {
			return given, fmt.Errorf("overlay range %s is full: no address for node %q", cidr, name)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM overlay_released WHERE ip = ?`, found); err != nil {
			return given, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE nodes SET overlay_ip = ? WHERE name = ?`, found, name); err != nil {
			return given, err
		}
		blocked[found] = true
		given++
	}
	if _, err := tx.ExecContext(ctx, `UPDATE overlay SET next_host = ? WHERE id = 1`, next); err != nil {
		return given, err
	}
	return given, nil
}

// overlayBlocked are the addresses that cannot be given now: every node's,
// and every released one some node may still hold (its roster is not
// above the one in force at the release). The nodes being given one
// (joining) hold no roster yet, and none from before the release.
func overlayBlocked(ctx context.Context, tx *sql.Tx, joining []string) (map[string]bool, error) {
	if joining == nil {
		joining = []string{} // JSON null would be one NULL: NOT IN it matches no node
	}
	list, err := json.Marshal(joining)
	if err != nil {
		return nil, fmt.Errorf("read the overlay addresses in use: %w", err)
	}
	blocked := map[string]bool{}
	rows, err := tx.QueryContext(ctx, `SELECT overlay_ip FROM nodes WHERE overlay_ip != ''`)
	if err != nil {
		return nil, fmt.Errorf("read the overlay addresses in use: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var ip string
		if err := rows.Scan(&ip); err != nil {
			return nil, fmt.Errorf("read the overlay addresses in use: %w", err)
		}
		blocked[ip] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the overlay addresses in use: %w", err)
	}
	rel, err := tx.QueryContext(ctx, `SELECT ip FROM overlay_released
		WHERE roster_seq >= coalesce((SELECT min(roster_seq) FROM nodes WHERE name NOT IN (SELECT value FROM json_each(?))), roster_seq + 1)`, string(list))
	if err != nil {
		return nil, fmt.Errorf("read the overlay addresses released: %w", err)
	}
	defer rel.Close()
	for rel.Next() {
		var ip string
		if err := rel.Scan(&ip); err != nil {
			return nil, fmt.Errorf("read the overlay addresses released: %w", err)
		}
		blocked[ip] = true
	}
	if err := rel.Err(); err != nil {
		return nil, fmt.Errorf("read the overlay addresses released: %w", err)
	}
	return blocked, nil
}

// releaseOverlay keeps node's overlay address, if it has one, among the
// released with the roster in force now. Called in the transaction that
// deletes the node.
func releaseOverlay(ctx context.Context, tx *sql.Tx, node string) error {
	if err := releaseOverlays(ctx, tx, `coalesce(removing_at, joined_at)`, `name = ? AND overlay_ip != ''`, node); err != nil {
		return fmt.Errorf("release the overlay address of node %q: %w", node, err)
	}
	return nil
}

// releaseOverlays keeps the overlay addresses of the nodes where (an SQL
// condition on nodes, with args) selects among the released, with the
// roster in force now: a host that has not taken the next roster still
// holds them. at is when they were released, an SQL expression.
func releaseOverlays(ctx context.Context, tx *sql.Tx, at, where string, args ...any) error {
	_, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO overlay_released (ip, roster_seq, released_at)
		SELECT overlay_ip, (SELECT coalesce(max(seq), 0) FROM rosters), `+at+`
		FROM nodes WHERE `+where, args...)
	return err
}

// RecordOverlayState records what node's host reported of its overlay
// (s.Node), received at at, and says whether the roster changes with it:
// the node is on the overlay and its endpoints or relay flag differ from
// those recorded. A missing node wraps ErrNotFound.
func (db *overlays) RecordOverlayState(ctx context.Context, s spec.OverlayState, at time.Time) (changed bool, err error) {
	body, err := json.Marshal(s)
	if err != nil {
		return false, fmt.Errorf("record the overlay of node %q: %w", s.Node, err)
	}
	endpoints := ""
	if len(s.Endpoints) > 0 {
		b, _ := json.Marshal(s.Endpoints)
		endpoints = string(b)
	}
	err = db.tx(ctx, func(tx *sql.Tx) error {
		var ip, was string
		var relay bool
		err := tx.QueryRowContext(ctx, `SELECT overlay_ip, overlay_endpoints, overlay_relay FROM nodes WHERE name = ?`, s.Node).Scan(&ip, &was, &relay)
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		var wasEndpoints []string
		if was != "" {
			if err := json.Unmarshal([]byte(was), &wasEndpoints); err != nil {
				return fmt.Errorf("overlay_endpoints: %w", err)
			}
		}
		changed = ip != "" && (relay != s.Relay || !slices.Equal(wasEndpoints, s.Endpoints))
		_, err = tx.ExecContext(ctx, `UPDATE nodes SET overlay_endpoints = ?, overlay_relay = ?, overlay_mode = ?, overlay_state = ?, overlay_at = ? WHERE name = ?`,
			endpoints, s.Relay, s.Mode, string(body), formatTime(at), s.Node)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("record the overlay of node %q: %w", s.Node, err)
	}
	return changed, nil
}

// OverlayReports are what every node's host last reported of its
// overlay, by node; a node that reported nothing is absent.
func (db *overlays) OverlayReports(ctx context.Context) (map[string]OverlayReport, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT name, overlay_state, overlay_at FROM nodes WHERE overlay_state != ''`)
	if err != nil {
		return nil, fmt.Errorf("read the overlay reports: %w", err)
	}
	defer rows.Close()
	out := map[string]OverlayReport{}
	for rows.Next() {
		name, r, err := scanOverlayReport(rows)
		if err != nil {
			return nil, fmt.Errorf("read the overlay reports: %w", err)
		}
		out[name] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the overlay reports: %w", err)
	}
	return out, nil
}

// OverlayReportOf is what node's host last reported of its overlay: the
// zero report when it reported nothing, ErrNotFound when there is no such
// node.
func (db *overlays) OverlayReportOf(ctx context.Context, node string) (OverlayReport, error) {
	_, r, err := scanOverlayReport(db.sql.QueryRowContext(ctx, `SELECT name, overlay_state, overlay_at FROM nodes WHERE name = ?`, node))
	if errors.Is(err, sql.ErrNoRows) {
		return OverlayReport{}, fmt.Errorf("read the overlay report of node %q: %w", node, ErrNotFound)
	}
	if err != nil {
		return OverlayReport{}, fmt.Errorf("read the overlay report of node %q: %w", node, err)
	}
	return r, nil
}

func scanOverlayReport(row interface{ Scan(...any) error }) (string, OverlayReport, error) {
	var name, body string
	var at sql.NullString
	if err := row.Scan(&name, &body, &at); err != nil {
		return "", OverlayReport{}, err
	}
	var r OverlayReport
	if body == "" {
		return name, r, nil
	}
	if err := json.Unmarshal([]byte(body), &r.State); err != nil {
		return "", OverlayReport{}, fmt.Errorf("node %q: overlay_state: %w", name, err)
	}
	if at.Valid {
		t, err := parseTime(at.String)
		if err != nil {
			return "", OverlayReport{}, fmt.Errorf("node %q: overlay_at: %w", name, err)
		}
		r.At = t
	}
	return name, r, nil
}
