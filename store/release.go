package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Release is a published mesh binary: the target read from the file, and
// its bytes, stored as the blob "sha256:" + Digest.
type Release struct {
	ID        int64  // the order of publishing
	Digest    string // hex SHA-256 of the binary
	GOOS      string
	GOARCH    string
	Go        string // the Go version that built it
	Size      int64
	Published time.Time
	// Retry, read with a node's binary (NodeBinary, NodeBinaries), counts
	// the resumed rolls that asked the node to try the release again; 0
	// otherwise.
	Retry int
}

// Blob is the digest of the blob that holds the release's bytes.
func (r Release) Blob() string { return "sha256:" + r.Digest }

// releases are the published binaries of mesh.
type releases struct{ *core }

// PublishRelease records r, whose blob must be stored. A release of the
// same digest already recorded is ErrExists, returned with the release as
// it was recorded; nothing changes.
func (db *releases) PublishRelease(ctx context.Context, r Release) (Release, error) {
	var kept Release
	err := db.tx(ctx, func(tx *sql.Tx) error {
		row := tx.QueryRowContext(ctx, `SELECT `+releaseColumns+` FROM releases WHERE digest = ?`, r.Digest)
		k, err := scanRelease(row)
		if err == nil {
			kept = k
			return ErrExists
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM blobs WHERE digest = ? AND size = ?`, r.Blob(), r.Size).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("its blob of %d bytes is not stored: %w", r.Size, ErrNotFound)
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO releases (digest, blob, goos, goarch, go_version, size, published_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			r.Digest, r.Blob(), r.GOOS, r.GOARCH, r.Go, r.Size, formatTime(r.Published))
		if err != nil {
			return err
		}
		kept = r
		kept.ID, err = res.LastInsertId()
		return err
	})
	if errors.Is(err, ErrExists) {
		return kept, fmt.Errorf("record release %s: %w", r.Digest, ErrExists)
	}
	if err != nil {
		return Release{}, fmt.Errorf("record release %s: %w", r.Digest, err)
	}
	return kept, nil
}

const releaseColumns = `id, digest, goos, goarch, go_version, size, published_at`

func scanRelease(row interface{ Scan(...any) error }) (Release, error) {
	var r Release
	var at string
	if err := row.Scan(&r.ID, &r.Digest, &r.GOOS, &r.GOARCH, &r.Go, &r.Size, &at); err != nil {
		return Release{}, err
	}
	t, err := parseTime(at)
	if err != nil {
		return Release{}, fmt.Errorf("release %s: %w", r.Digest, err)
	}
	r.Published = t
	return r, nil
}

// Release is the release of digest, or an error wrapping ErrNotFound.
func (db *releases) Release(ctx context.Context, digest string) (Release, error) {
	r, err := scanRelease(db.sql.QueryRowContext(ctx, `SELECT `+releaseColumns+` FROM releases WHERE digest = ?`, digest))
	if errors.Is(err, sql.ErrNoRows) {
		return Release{}, fmt.Errorf("read release %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return Release{}, fmt.Errorf("read release %s: %w", digest, err)
	}
	return r, nil
}

// Releases are the releases published after the one numbered after, in
// the order they were, at most limit.
func (db *releases) Releases(ctx context.Context, after int64, limit int) ([]Release, error) {
	rows, err := db.sql.QueryContext(ctx, `SELECT `+releaseColumns+` FROM releases WHERE id > ? ORDER BY id LIMIT ?`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read releases: %w", err)
	}
	defer rows.Close()
	var rs []Release
	for rows.Next() {
		r, err := scanRelease(rows)
		if err != nil {
			return nil, fmt.Errorf("read releases: %w", err)
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read releases: %w", err)
	}
	return rs, nil
}
