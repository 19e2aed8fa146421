package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// Module is a registered module.
type Module struct {
	Module     spec.Module
	Registered time.Time
}

// modules are the registered modules and their assignments to nodes.
type modules struct{ *core }

// RegisterModules records modules in one transaction, each replacing any
// earlier version of the same name. It returns the versions replaced, by
// name. Every blob a module names must already be stored.
func (db *modules) RegisterModules(ctx context.Context, mods []spec.Module, at time.Time) (map[string]string, error) {
	previous := map[string]string{}
	err := db.tx(ctx, func(tx *sql.Tx) error {
		for _, m := range mods {
			for digest := range m.Blobs() {
				var n int
				if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM blobs WHERE digest = ?`, digest).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					return fmt.Errorf("module %q names blob %s, which was not uploaded", m.Name, digest)
				}
			}
			var prev string
			err := tx.QueryRowContext(ctx, `SELECT version FROM modules WHERE name = ?`, m.Name).Scan(&prev)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err == nil {
				previous[m.Name] = prev
			}
			body, err := json.Marshal(m)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO modules (name, version, body, registered_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (name) DO UPDATE SET version = excluded.version, body = excluded.body, registered_at = excluded.registered_at`,
				m.Name, m.Version, string(body), formatTime(at)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("register modules: %w", err)
	}
	return previous, nil
}

func scanModule(row interface{ Scan(...any) error }) (Module, error) {
	var body, at string
	if err := row.Scan(&body, &at); err != nil {
		return Module{}, err
	}
	var m Module
	if err := json.Unmarshal([]byte(body), &m.Module); err != nil {
		return Module{}, fmt.Errorf("module body: %w", err)
	}
	t, err := parseTime(at)
	if err != nil {
		return Module{}, err
	}
	m.Registered = t
	return m, nil
}

// Module returns the module called name, or an error wrapping ErrNotFound.
func (db *modules) Module(ctx context.Context, name string) (Module, error) {
	m, err := scanModule(db.sql.QueryRowContext(ctx, `SELECT body, registered_at FROM modules WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Module{}, fmt.Errorf("read module %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Module{}, fmt.Errorf("read module %q: %w", name, err)
	}
	return m, nil
}

// Modules returns every module, by name.
func (db *modules) Modules(ctx context.Context) ([]Module, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT body, registered_at FROM modules ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read modules: %w", err)
	}
	defer rows.Close()
	var ms []Module
	for rows.Next() {
		m, err := scanModule(rows)
		if err != nil {
			return nil, fmt.Errorf("read modules: %w", err)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read modules: %w", err)
	}
	return ms, nil
}

// Assignment is a module assigned to a node, with the settings it gives.
type Assignment struct {
	Module   string
	Node     string
	Settings map[string]string
}

// Assign assigns module to node with settings; assigning again replaces the
// settings. A missing module or node wraps ErrNotFound.
func (db *modules) Assign(ctx context.Context, module, node string, settings map[string]string, at time.Time) error {
	if settings == nil {
		settings = map[string]string{}
	}
	body, err := json.Marshal(settings)
	if err != nil {
		return fmt.Errorf("assign %s to %s: %w", module, node, err)
	}
	err = db.tx(ctx, func(tx *sql.Tx) error {
		if err := moduleAndNodeExist(ctx, tx, module, node); err != nil {
			return err
		}
		return putAssignment(ctx, tx, module, node, body, at)
	})
	if err != nil {
		return fmt.Errorf("assign %s to %s: %w", module, node, err)
	}
	return nil
}

// Reassign assigns module to node as Assign does, but keeps the settings
// it holds there already: set replaces the values it names, unset drops
// those it names, and every other value is kept as it is stored, in one
// transaction. A missing module or node wraps ErrNotFound.
func (db *modules) Reassign(ctx context.Context, module, node string, set map[string]string, unset []string, at time.Time) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		if err := moduleAndNodeExist(ctx, tx, module, node); err != nil {
			return err
		}
		settings := map[string]string{}
		var kept string
		err := tx.QueryRowContext(ctx, `SELECT settings FROM assignments WHERE module = ? AND node = ?`, module, node).Scan(&kept)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			if err := json.Unmarshal([]byte(kept), &settings); err != nil {
				return fmt.Errorf("settings kept: %w", err)
			}
			if settings == nil {
				settings = map[string]string{}
			}
		}
		for _, name := range unset {
			delete(settings, name)
		}
		for name, v := range set {
			settings[name] = v
		}
		body, err := json.Marshal(settings)
		if err != nil {
			return err
		}
		return putAssignment(ctx, tx, module, node, body, at)
	})
	if err != nil {
		return fmt.Errorf("assign %s to %s: %w", module, node, err)
	}
	return nil
}

// moduleAndNodeExist wraps ErrNotFound, naming which, when module or node
// is missing.
func moduleAndNodeExist(ctx context.Context, tx *sql.Tx, module, node string) error {
	for _, q := range []struct{ table, name string }{{"modules", module}, {"nodes", node}} {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM `+q.table+` WHERE name = ?`, q.name).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no %s called %q: %w", q.table[:len(q.table)-1], q.name, ErrNotFound)
		}
	}
	return nil
}

// putAssignment records module on node with the settings in body,
// replacing those of an assignment there already.
func putAssignment(ctx context.Context, tx *sql.Tx, module, node string, body []byte, at time.Time) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO assignments (module, node, assigned_at, settings) VALUES (?, ?, ?, ?)
		ON CONFLICT (module, node) DO UPDATE SET settings = excluded.settings`,
		module, node, formatTime(at), string(body))
	return err
}

// AssignedError is a module that cannot be removed: these nodes hold it.
type AssignedError struct {
	Module string
	Nodes  []string
}

func (e *AssignedError) Error() string {
	return fmt.Sprintf("module %q is assigned to %s", e.Module, strings.Join(e.Nodes, ", "))
}

// RemoveModule removes module name from the catalogue and returns it as it
// was. One that does not exist wraps ErrNotFound; one still assigned is an
// *AssignedError naming the nodes, and nothing is removed. The blobs its
// resources named stay until CollectBlobs finds nothing names them:
// another module may name the same content, a node's last declaration
// may still carry it.
func (db *modules) RemoveModule(ctx context.Context, name string) (Module, error) {
	var m Module
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var err error
		m, err = scanModule(tx.QueryRowContext(ctx, `SELECT body, registered_at FROM modules WHERE name = ?`, name))
		if errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT node FROM assignments WHERE module = ? ORDER BY node`, name)
		if err != nil {
			return err
		}
		defer rows.Close()
		var nodes []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			nodes = append(nodes, n)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(nodes) > 0 {
			return &AssignedError{Module: name, Nodes: nodes}
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM modules WHERE name = ?`, name)
		return err
	})
	if err != nil {
		return Module{}, fmt.Errorf("remove module %q: %w", name, err)
	}
	return m, nil
}

// Unassign removes the assignment of module to node, and with it the
// grants it consumes there; one that does not exist wraps ErrNotFound.
func (db *modules) Unassign(ctx context.Context, module, node string) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM assignments WHERE module = ? AND node = ?`, module, node)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("unassign %s from %s: %w", module, node, err)
	}
	return nil
}

// Assignments returns every assignment, by node then module.
func (db *modules) Assignments(ctx context.Context) ([]Assignment, error) {
	as, err := db.assignments(ctx, `SELECT module, node, settings FROM assignments ORDER BY node, module`)
	if err != nil {
		return nil, fmt.Errorf("read assignments: %w", err)
	}
	return as, nil
}

// AssignmentsOf returns the assignments of node, by module.
func (db *modules) AssignmentsOf(ctx context.Context, node string) ([]Assignment, error) {
	as, err := db.assignments(ctx, `SELECT module, node, settings FROM assignments WHERE node = ? ORDER BY module`, node)
	if err != nil {
		return nil, fmt.Errorf("read assignments of node %q: %w", node, err)
	}
	return as, nil
}

// Assignment is module's assignment to node; none wraps ErrNotFound.
func (db *modules) Assignment(ctx context.Context, module, node string) (Assignment, error) {
	as, err := db.assignments(ctx, `SELECT module, node, settings FROM assignments WHERE module = ? AND node = ?`, module, node)
	if err != nil {
		return Assignment{}, fmt.Errorf("read the assignment of %s to %s: %w", module, node, err)
	}
	if len(as) == 0 {
		return Assignment{}, fmt.Errorf("%s is not assigned to %s: %w", module, node, ErrNotFound)
	}
	return as[0], nil
}

func (db *modules) assignments(ctx context.Context, query string, args ...any) ([]Assignment, error) {
	rows, err := db.sql.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var as []Assignment
	for rows.Next() {
		var a Assignment
		var settings string
		if err := rows.Scan(&a.Module, &a.Node, &settings); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(settings), &a.Settings); err != nil {
			return nil, fmt.Errorf("settings of %s on %s: %w", a.Module, a.Node, err)
		}
		as = append(as, a)
	}
	return as, rows.Err()
}

// RewriteSettings passes each assignment of the modules named (all of them
// when none is), with its module as registered, to rewrite, and writes
// back the settings of those it says changed, all in one transaction: an
// error from rewrite writes nothing. It returns how many it wrote.
func (db *modules) RewriteSettings(ctx context.Context, modules []string, rewrite func(Assignment, spec.Module) (map[string]string, bool, error)) (int, error) {
	query := `SELECT a.module, a.node, a.settings, m.body FROM assignments a JOIN modules m ON m.name = a.module`
	var args []any
	if len(modules) > 0 {
		query += ` WHERE a.module IN (?` + strings.Repeat(`, ?`, len(modules)-1) + `)`
		for _, m := range modules {
			args = append(args, m)
		}
	}
	query += ` ORDER BY a.node, a.module`
	written := 0
	err := db.tx(ctx, func(tx *sql.Tx) error {
		type row struct {
			a   Assignment
			mod spec.Module
		}
		var all []row
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r row
			var settings, body string
			if err := rows.Scan(&r.a.Module, &r.a.Node, &settings, &body); err != nil {
				return err
			}
			if err := json.Unmarshal([]byte(settings), &r.a.Settings); err != nil {
				return fmt.Errorf("settings of %s on %s: %w", r.a.Module, r.a.Node, err)
			}
			if err := json.Unmarshal([]byte(body), &r.mod); err != nil {
				return fmt.Errorf("module %s: %w", r.a.Module, err)
			}
			all = append(all, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		for _, r := range all {
			settings, changed, err := rewrite(r.a, r.mod)
			if err != nil {
				return err
			}
			if !changed {
				continue
			}
			if settings == nil {
				settings = map[string]string{}
			}
			body, err := json.Marshal(settings)
			if err != nil {
				return fmt.Errorf("settings of %s on %s: %w", r.a.Module, r.a.Node, err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE assignments SET settings = ? WHERE module = ? AND node = ?`,
				string(body), r.a.Module, r.a.Node); err != nil {
				return err
			}
			written++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("rewrite settings: %w", err)
	}
	return written, nil
}

// SettingsChange is a rewrite of the settings of Module on Node, made only
// if they are still From.
type SettingsChange struct {
	Module, Node string
	From, To     map[string]string
}

// ChangeSettings makes each change whose assignment's settings are still
// its From, in one transaction, and says how many it made: RewriteSettings
// with the rewrite computed beforehand, so a log can carry it.
func (db *modules) ChangeSettings(ctx context.Context, cs []SettingsChange) (int, error) {
	changed := 0
	err := db.tx(ctx, func(tx *sql.Tx) error {
		for _, c := range cs {
			var text string
			err := tx.QueryRowContext(ctx, `SELECT settings FROM assignments WHERE module = ? AND node = ?`, c.Module, c.Node).Scan(&text)
			if errors.Is(err, sql.ErrNoRows) {
				continue
			}
			if err != nil {
				return err
			}
			var now map[string]string
			if err := json.Unmarshal([]byte(text), &now); err != nil {
				return fmt.Errorf("settings of %s on %s: %w", c.Module, c.Node, err)
			}
			if !sameSettings(now, c.From) {
				continue
			}
			to := c.To
			if to == nil {
				to = map[string]string{}
			}
			body, err := json.Marshal(to)
			if err != nil {
				return fmt.Errorf("settings of %s on %s: %w", c.Module, c.Node, err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE assignments SET settings = ? WHERE module = ? AND node = ?`,
				string(body), c.Module, c.Node); err != nil {
				return err
			}
			changed++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("change settings: %w", err)
	}
	return changed, nil
}

func sameSettings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
