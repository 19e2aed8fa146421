package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Intermediate is the CA's intermediate that signs, as the store keeps
// it: its key only sealed.
type Intermediate struct {
	Serial    string
	CertPEM   string
	KeySealed string
	Set       time.Time
}

// Intermediate is the intermediate that signs, or ErrNotFound while it
// is genesis's.
func (db *certs) Intermediate(ctx context.Context) (Intermediate, error) {
	var in Intermediate
	var at string
	err := db.sql.QueryRowContext(ctx, `SELECT serial, cert_pem, key_sealed, set_at FROM ca_intermediate WHERE id = 1`).
		Scan(&in.Serial, &in.CertPEM, &in.KeySealed, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Intermediate{}, ErrNotFound
	}
	if err != nil {
		return Intermediate{}, fmt.Errorf("read the CA's intermediate: %w", err)
	}
	if in.Set, err = parseTime(at); err != nil {
		return Intermediate{}, fmt.Errorf("read the CA's intermediate: %w", err)
	}
	return in, nil
}

// SetIntermediate makes in the intermediate that signs and records
// domain (when not empty, and not recorded yet) with it, in one
// transaction: the domain is never recorded without the intermediate
// that signs under it.
func (db *certs) SetIntermediate(ctx context.Context, in Intermediate, domain string) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		if domain != "" {
			if _, err := tx.ExecContext(ctx, `INSERT INTO ca_domains (name, added_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`,
				domain, formatTime(in.Set)); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO ca_intermediate (id, serial, cert_pem, key_sealed, set_at) VALUES (1, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET serial = excluded.serial, cert_pem = excluded.cert_pem, key_sealed = excluded.key_sealed, set_at = excluded.set_at`,
			in.Serial, in.CertPEM, in.KeySealed, formatTime(in.Set))
		return err
	})
	if err != nil {
		return fmt.Errorf("record the CA's intermediate %s: %w", in.Serial, err)
	}
	return nil
}
