package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// EdgeStorageKey is the mesh's edge storage key as kept (sealed by the
// controller), or ErrNotFound while none was made.
func (db *meshes) EdgeStorageKey(ctx context.Context) (string, error) {
	return readEdgeStorageKey(ctx, db.sql)
}

func readEdgeStorageKey(ctx context.Context, q querier) (string, error) {
	var sealed string
	err := q.QueryRowContext(ctx, `SELECT sealed FROM edge_storage_key WHERE id = 1`).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrNotFound
	}
	if err != nil {
		return "", fmt.Errorf("read the edge storage key: %w", err)
	}
	return sealed, nil
}

// KeepEdgeStorageKey keeps sealed as the mesh's edge storage key unless
// one is kept already, and returns the one kept: of two controllers'
// calls, both get the first's.
func (db *meshes) KeepEdgeStorageKey(ctx context.Context, sealed string, at time.Time) (string, error) {
	var kept string
	err := db.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO edge_storage_key (id, sealed, created_at) VALUES (1, ?, ?) ON CONFLICT (id) DO NOTHING`,
			sealed, formatTime(at)); err != nil {
			return err
		}
		var err error
		kept, err = readEdgeStorageKey(ctx, tx)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("keep the edge storage key: %w", err)
	}
	return kept, nil
}
