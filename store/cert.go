package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrExists is returned by an add of what the store already holds.
var ErrExists = errors.New("already exists")

// CADomain is a public domain the operator declared.
type CADomain struct {
	Name  string
	Added time.Time
}

// certs are the CA's domains and the certificates it issued.
type certs struct{ *core }

// AddCADomain records a declared domain; one already recorded is
// ErrExists.
func (db *certs) AddCADomain(ctx context.Context, name string, at time.Time) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM ca_domains WHERE name = ?`, name).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return ErrExists
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO ca_domains (name, added_at) VALUES (?, ?)`, name, formatTime(at))
		return err
	})
	if err != nil {
		return fmt.Errorf("record CA domain %q: %w", name, err)
	}
	return nil
}

// CADomains are the declared domains, by name.
func (db *certs) CADomains(ctx context.Context) ([]CADomain, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT name, added_at FROM ca_domains ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read CA domains: %w", err)
	}
	defer rows.Close()
	var ds []CADomain
	for rows.Next() {
		var d CADomain
		var at string
		if err := rows.Scan(&d.Name, &at); err != nil {
			return nil, fmt.Errorf("read CA domains: %w", err)
		}
		if d.Added, err = parseTime(at); err != nil {
			return nil, fmt.Errorf("read CA domain %q: %w", d.Name, err)
		}
		ds = append(ds, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read CA domains: %w", err)
	}
	return ds, nil
}

// Cert is a leaf the controller signed for a node.
type Cert struct {
	ID       int64 // the order of issue
	Serial   string
	Node     string
	Names    []string
	NotAfter time.Time
	Issued   time.Time
}

// RecordCert records a leaf issued, with each of its names.
func (db *certs) RecordCert(ctx context.Context, c Cert) error {
	names, err := json.Marshal(c.Names)
	if err != nil {
		return fmt.Errorf("record certificate %s: %w", c.Serial, err)
	}
	err = db.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO certs (serial, node, names, not_after, issued_at) VALUES (?, ?, ?, ?, ?)`,
			c.Serial, c.Node, string(names), formatTime(c.NotAfter), formatTime(c.Issued))
		if err != nil {
			return err
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		for _, n := range c.Names {
			if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO cert_names (cert_id, node, name) VALUES (?, ?, ?)`, id, c.Node, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record certificate %s of node %q: %w", c.Serial, c.Node, err)
	}
	return nil
}

const certColumns = `c.id, c.serial, c.node, c.names, c.not_after, c.issued_at`

func scanCert(rows *sql.Rows, extra ...any) (Cert, error) {
	var c Cert
	var names, notAfter, issued string
	if err := rows.Scan(append(extra, &c.ID, &c.Serial, &c.Node, &names, &notAfter, &issued)...); err != nil {
		return Cert{}, err
	}
	if err := json.Unmarshal([]byte(names), &c.Names); err != nil {
		return Cert{}, fmt.Errorf("certificate %s: names: %w", c.Serial, err)
	}
	var err error
	if c.NotAfter, err = parseTime(notAfter); err != nil {
		return Cert{}, fmt.Errorf("certificate %s: %w", c.Serial, err)
	}
	if c.Issued, err = parseTime(issued); err != nil {
		return Cert{}, fmt.Errorf("certificate %s: %w", c.Serial, err)
	}
	return c, nil
}

// Certs are the leaves issued after the one numbered after, in the order
// they were, at most limit.
func (db *certs) Certs(ctx context.Context, after int64, limit int) ([]Cert, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT `+certColumns+` FROM certs c WHERE c.id > ? ORDER BY c.id LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read certificates: %w", err)
	}
	defer rows.Close()
	var cs []Cert
	for rows.Next() {
		c, err := scanCert(rows)
		if err != nil {
			return nil, fmt.Errorf("read certificates: %w", err)
		}
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read certificates: %w", err)
	}
	return cs, nil
}

// NameCert is the latest leaf issued to a node for one of its names.
type NameCert struct {
	Name string
	Cert Cert
}

// LatestCerts is, for each node and each name a leaf was issued to it
// for, the latest such leaf: by node, then name.
func (db *certs) LatestCerts(ctx context.Context) ([]NameCert, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT n.name, `+certColumns+`
		FROM (SELECT node, name, max(cert_id) AS id FROM cert_names GROUP BY node, name) n
		JOIN certs c ON c.id = n.id ORDER BY c.node, n.name`)
	if err != nil {
		return nil, fmt.Errorf("read latest certificates: %w", err)
	}
	defer rows.Close()
	var out []NameCert
	for rows.Next() {
		var nc NameCert
		c, err := scanCert(rows, &nc.Name)
		if err != nil {
			return nil, fmt.Errorf("read latest certificates: %w", err)
		}
		nc.Cert = c
		out = append(out, nc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read latest certificates: %w", err)
	}
	return out, nil
}
