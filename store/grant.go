package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// grants keeps the credentials minted for the consumers of grants.
type grants struct{ *core }

// Grant is a credential minted for a consumer (Module on Node) of a grant,
// given by the provider on node Provider. Credential is as the caller
// stored it (the controller seals it first).
type Grant struct {
	Module     string
	Node       string
	Grant      string
	Provider   string
	Credential string
	MintedAt   time.Time
}

// PutGrants records gs in one transaction. A grant the consumer holds
// already keeps its credential and minted time and takes gs's provider.
func (db *grants) PutGrants(ctx context.Context, gs []Grant) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		for _, g := range gs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO grants (module, node, grant, provider, credential, minted_at) VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (module, node, grant) DO UPDATE SET provider = excluded.provider`,
				g.Module, g.Node, g.Grant, g.Provider, g.Credential, formatTime(g.MintedAt)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record grants: %w", err)
	}
	return nil
}

// RotateGrants replaces the credentials of the consumer module on node,
// grant by grant, in one transaction; a grant it does not hold wraps
// ErrNotFound, and nothing changes.
func (db *grants) RotateGrants(ctx context.Context, module, node string, credentials map[string]string, at time.Time) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		for grant, c := range credentials {
			res, err := tx.ExecContext(ctx, `UPDATE grants SET credential = ?, minted_at = ? WHERE module = ? AND node = ? AND grant = ?`,
				c, formatTime(at), module, node, grant)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 0 {
				return fmt.Errorf("grant %q: %w", grant, ErrNotFound)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rotate the grants of %s on %s: %w", module, node, err)
	}
	return nil
}

// Grants is every grant minted, by provider, grant, module then node.
func (db *grants) Grants(ctx context.Context) ([]Grant, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT module, node, grant, provider, credential, minted_at FROM grants
		ORDER BY provider, grant, module, node`)
	if err != nil {
		return nil, fmt.Errorf("read grants: %w", err)
	}
	defer rows.Close()
	var gs []Grant
	for rows.Next() {
		var g Grant
		var at string
		if err := rows.Scan(&g.Module, &g.Node, &g.Grant, &g.Provider, &g.Credential, &at); err != nil {
			return nil, fmt.Errorf("read grants: %w", err)
		}
		if g.MintedAt, err = parseTime(at); err != nil {
			return nil, fmt.Errorf("read grants: %w", err)
		}
		gs = append(gs, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read grants: %w", err)
	}
	return gs, nil
}
