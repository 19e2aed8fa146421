package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Mesh is the mesh this store belongs to.
type Mesh struct {
	Name    string
	Created time.Time
}

// Operator is one holder of the operator credential.
type Operator struct {
	Name string
	NKey string // public key
}

// meshes is the mesh itself and its operators.
type meshes struct{ *core }

// CreateMesh records the mesh and its first operator, once. A store that
// already holds a mesh refuses.
func (db *meshes) CreateMesh(ctx context.Context, m Mesh, op Operator) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO mesh (id, name, created_at) VALUES (1, ?, ?)`,
			m.Name, formatTime(m.Created)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO operators (name, nkey, created_at) VALUES (?, ?, ?)`,
			op.Name, op.NKey, formatTime(m.Created))
		return err
	})
	if err != nil {
		return fmt.Errorf("record mesh %q: %w", m.Name, err)
	}
	return nil
}

// Mesh returns the mesh this store holds, or ErrNotFound.
func (db *meshes) Mesh(ctx context.Context) (Mesh, error) {
	var m Mesh
	var created string
	err := db.sql.QueryRowContext(ctx, `SELECT name, created_at FROM mesh WHERE id = 1`).Scan(&m.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Mesh{}, ErrNotFound
	}
	if err != nil {
		return Mesh{}, fmt.Errorf("read mesh: %w", err)
	}
	if m.Created, err = parseTime(created); err != nil {
		return Mesh{}, fmt.Errorf("read mesh: created_at: %w", err)
	}
	return m, nil
}

// Operators returns every operator.
func (db *meshes) Operators(ctx context.Context) ([]Operator, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT name, nkey FROM operators ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read operators: %w", err)
	}
	defer rows.Close()
	var ops []Operator
	for rows.Next() {
		var op Operator
		if err := rows.Scan(&op.Name, &op.NKey); err != nil {
			return nil, fmt.Errorf("read operators: %w", err)
		}
		ops = append(ops, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read operators: %w", err)
	}
	return ops, nil
}
