package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Token is a join token as the store keeps it: the public key of its
// enrolment user, never the secret.
type Token struct {
	ID        string
	Node      string
	EnrolNKey string
	Created   time.Time
	Expires   time.Time
	Used      time.Time // zero if not used
	Revoked   time.Time // zero if not revoked
	// Controller marks a token that enrols a controller of the mesh
	// with its node.
	Controller bool
}

// ErrTokenSpent is returned by Enrol when the token was used or revoked
// between the caller's check and the write.
var ErrTokenSpent = errors.New("token already used or revoked")

// tokens are the enrolment tokens, and enrolment itself.
type tokens struct{ *core }

// AddToken records a new token.
func (db *tokens) AddToken(ctx context.Context, t Token) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, node, enrol_nkey, created_at, expires_at, controller) VALUES (?, ?, ?, ?, ?, ?)`,
			t.ID, t.Node, t.EnrolNKey, formatTime(t.Created), formatTime(t.Expires), t.Controller)
		return err
	})
	if err != nil {
		return fmt.Errorf("record token %s: %w", t.ID, err)
	}
	return nil
}

const tokenColumns = `id, node, enrol_nkey, created_at, expires_at, used_at, revoked_at, controller`

func scanToken(row interface{ Scan(...any) error }) (Token, error) {
	var t Token
	var created, expires string
	var used, revoked sql.NullString
	if err := row.Scan(&t.ID, &t.Node, &t.EnrolNKey, &created, &expires, &used, &revoked, &t.Controller); err != nil {
		return Token{}, err
	}
	var err error
	for _, f := range []struct {
		s   string
		dst *time.Time
	}{{created, &t.Created}, {expires, &t.Expires}, {used.String, &t.Used}, {revoked.String, &t.Revoked}} {
		if f.s == "" {
			continue
		}
		if *f.dst, err = parseTime(f.s); err != nil {
			return Token{}, err
		}
	}
	return t, nil
}

// Token returns the token id, or an error wrapping ErrNotFound.
func (db *tokens) Token(ctx context.Context, id string) (Token, error) {
	t, err := scanToken(db.sql.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, fmt.Errorf("read token %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Token{}, fmt.Errorf("read token %s: %w", id, err)
	}
	return t, nil
}

// Tokens returns every token, oldest first.
func (db *tokens) Tokens(ctx context.Context) ([]Token, error) {
	return db.tokens(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_at, id`)
}

// OpenTokens returns the tokens neither used nor revoked, oldest first: an
// expired one among them is the caller's to judge, by its clock. A used
// token stays in the store, so this is what the controller reads at every
// token and join instead of every token ever made.
func (db *tokens) OpenTokens(ctx context.Context) ([]Token, error) {
	return db.tokens(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE used_at IS NULL AND revoked_at IS NULL ORDER BY created_at, id`)
}

func (db *tokens) tokens(ctx context.Context, query string) ([]Token, error) {
	rows, err := db.sql.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	defer rows.Close()
	var ts []Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, fmt.Errorf("read tokens: %w", err)
		}
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	return ts, nil
}

// RevokeToken ends token id at the time given; a token already revoked keeps
// its first revocation time. A missing token wraps ErrNotFound.
func (db *tokens) RevokeToken(ctx context.Context, id string, at time.Time) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, formatTime(at), id)
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
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	return nil
}

// Enrol spends token id and records node, in one transaction: either both
// happen or neither. A token used or revoked meanwhile is ErrTokenSpent.
// With the overlay on, a node with a WireGuard key is given its overlay
// address in the same transaction.
func (db *tokens) Enrol(ctx context.Context, id string, n Node) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tokens SET used_at = ? WHERE id = ? AND used_at IS NULL AND revoked_at IS NULL`,
			formatTime(n.Joined), id)
		if err != nil {
			return err
		}
		if k, err := res.RowsAffected(); err != nil {
			return err
		} else if k == 0 {
			return ErrTokenSpent
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO nodes (name, address, nkey, seal_key, wg_key, joined_at) VALUES (?, ?, ?, ?, ?, ?)`,
			n.Name, n.Address, n.NKey, n.SealKey, n.WGKey, formatTime(n.Joined))
		if err != nil {
			return err
		}
		// With the overlay on, a node with a key has its address from
		// the moment it joins.
		_, err = allocateOverlay(ctx, tx, n.Name)
		return err
	})
	if err != nil {
		return fmt.Errorf("enrol node %q with token %s: %w", n.Name, id, err)
	}
	return nil
}
