package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// A blob is stored as chunks (table blob_chunks), written as an upload
// receives them, in order; it is whole, and may be named and served, once
// its row in blobs exists. Nothing here holds more than one chunk.

// ErrUploadOrder is a chunk that does not continue the upload of its blob
// where it stands (or an upload that is not under way).
var ErrUploadOrder = errors.New("the chunk does not continue the upload")

// Upload is a blob upload under way.
type Upload struct {
	Digest   string
	Size     int64
	Received int64
	// Hash is the running SHA-256 state of the bytes received, as
	// crypto/sha256 marshals it; empty before the first chunk.
	Hash    []byte
	Updated time.Time
}

// blobs are the content-addressed blobs and their uploads.
type blobs struct{ *core }

// BeginUpload starts the upload of blob digest of size bytes, dropping any
// earlier upload of it (its chunks too). It returns false, and starts
// nothing, when the blob is whole already: then it only touches it.
func (db *blobs) BeginUpload(ctx context.Context, digest string, size int64, at time.Time) (bool, error) {
	began := false
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM blobs WHERE digest = ?`, digest).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			// Offered again: the collector leaves it for a while.
			_, err := tx.ExecContext(ctx, `UPDATE blobs SET touched_at = ? WHERE digest = ?`, auditTime(at), digest)
			return err
		}
		if err := dropUpload(ctx, tx, digest); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO blob_uploads (digest, size, received, hash, updated_at) VALUES (?, ?, 0, x'', ?)`,
			digest, size, formatTime(at)); err != nil {
			return err
		}
		began = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("begin the upload of blob %s: %w", digest, err)
	}
	return began, nil
}

// UploadOf is the upload of blob digest under way, or an error wrapping
// ErrNotFound.
func (db *blobs) UploadOf(ctx context.Context, digest string) (Upload, error) {
	u := Upload{Digest: digest}
	var at string
	err := db.sql.QueryRowContext(ctx, `SELECT size, received, hash, updated_at FROM blob_uploads WHERE digest = ?`, digest).
		Scan(&u.Size, &u.Received, &u.Hash, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Upload{}, fmt.Errorf("read the upload of blob %s: %w", digest, ErrNotFound)
	}
	if err == nil {
		u.Updated, err = parseTime(at)
	}
	if err != nil {
		return Upload{}, fmt.Errorf("read the upload of blob %s: %w", digest, err)
	}
	return u, nil
}

// PutUploadChunk records data, received at offset, with hash the running
// SHA-256 state that now includes it. The upload must stand at offset
// (else ErrUploadOrder, and nothing changes). When whole is true the chunk
// is the last, its digest verified by the caller: the blob becomes whole in
// the same transaction and the upload ends.
func (db *blobs) PutUploadChunk(ctx context.Context, digest string, offset int64, data, hash []byte, whole bool, at time.Time) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var size, received int64
		err := tx.QueryRowContext(ctx, `SELECT size, received FROM blob_uploads WHERE digest = ?`, digest).Scan(&size, &received)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no upload is under way: %w", ErrUploadOrder)
		}
		if err != nil {
			return err
		}
		end := offset + int64(len(data))
		switch {
		case received != offset:
			return fmt.Errorf("%d bytes were received, the chunk is at %d: %w", received, offset, ErrUploadOrder)
		case len(data) == 0 || end > size:
			return fmt.Errorf("a chunk of %d bytes at %d does not fit a blob of %d: %w", len(data), offset, size, ErrUploadOrder)
		case whole != (end == size):
			return fmt.Errorf("a chunk ending at %d of %d cannot end the upload: %w", end, size, ErrUploadOrder)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO blob_chunks (digest, start, data) VALUES (?, ?, ?)`, digest, offset, data); err != nil {
			return err
		}
		if whole {
			if _, err := tx.ExecContext(ctx, `DELETE FROM blob_uploads WHERE digest = ?`, digest); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO blobs (digest, size, touched_at) VALUES (?, ?, ?)`, digest, size, auditTime(at))
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE blob_uploads SET received = ?, hash = ?, updated_at = ? WHERE digest = ?`,
			end, hash, formatTime(at), digest)
		return err
	})
	if err != nil {
		return fmt.Errorf("store a chunk of blob %s at %d: %w", digest, offset, err)
	}
	return nil
}

// DropUpload ends the upload of blob digest, removing what it received.
// One not under way is no error.
func (db *blobs) DropUpload(ctx context.Context, digest string) error {
	if err := db.tx(ctx, func(tx *sql.Tx) error { return dropUpload(ctx, tx, digest) }); err != nil {
		return fmt.Errorf("drop the upload of blob %s: %w", digest, err)
	}
	return nil
}

// DropUploadsBefore ends every upload that received nothing since before
// (abandoned: its caller went away), removing what each received. It
// returns how many it ended.
func (db *blobs) DropUploadsBefore(ctx context.Context, before time.Time) (int, error) {
	n := 0
	err := db.tx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT digest, updated_at FROM blob_uploads`)
		if err != nil {
			return err
		}
		var stale []string
		for rows.Next() {
			var digest, at string
			if err := rows.Scan(&digest, &at); err != nil {
				rows.Close()
				return err
			}
			t, err := parseTime(at)
			if err != nil {
				rows.Close()
				return fmt.Errorf("upload of blob %s: %w", digest, err)
			}
			if t.Before(before) {
				stale = append(stale, digest)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, d := range stale {
			if err := dropUpload(ctx, tx, d); err != nil {
				return err
			}
		}
		n = len(stale)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("drop abandoned blob uploads: %w", err)
	}
	return n, nil
}

// dropUpload removes the upload of digest and its chunks; a whole blob's
// chunks are never touched.
func dropUpload(ctx context.Context, tx *sql.Tx, digest string) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM blobs WHERE digest = ?`, digest).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		if _, err := tx.ExecContext(ctx, `DELETE FROM blob_chunks WHERE digest = ?`, digest); err != nil {
			return err
		}
	}
	_, err := tx.ExecContext(ctx, `DELETE FROM blob_uploads WHERE digest = ?`, digest)
	return err
}

// PutBlob stores a blob whose digest the caller verified, whole, in chunks
// of spec.BlobChunk, in one transaction, touched at. One stored already is
// only touched.
func (db *blobs) PutBlob(ctx context.Context, digest string, data []byte, at time.Time) error {
	err := db.tx(ctx, func(tx *sql.Tx) error {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM blobs WHERE digest = ?`, digest).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			_, err := tx.ExecContext(ctx, `UPDATE blobs SET touched_at = ? WHERE digest = ?`, auditTime(at), digest)
			return err
		}
		if err := dropUpload(ctx, tx, digest); err != nil {
			return err
		}
		for off := 0; off < len(data); off += spec.BlobChunk {
			if _, err := tx.ExecContext(ctx, `INSERT INTO blob_chunks (digest, start, data) VALUES (?, ?, ?)`,
				digest, off, data[off:min(off+spec.BlobChunk, len(data))]); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO blobs (digest, size, touched_at) VALUES (?, ?, ?)`, digest, len(data), auditTime(at))
		return err
	})
	if err != nil {
		return fmt.Errorf("store blob %s: %w", digest, err)
	}
	return nil
}

// HasBlob reports whether the blob is stored whole.
func (db *blobs) HasBlob(ctx context.Context, digest string) (bool, error) {
	var n int
	if err := db.sql.QueryRowContext(ctx, `SELECT count(*) FROM blobs WHERE digest = ?`, digest).Scan(&n); err != nil {
		return false, fmt.Errorf("read blob %s: %w", digest, err)
	}
	return n > 0, nil
}

// BlobSize is a whole blob's size, read without its bytes.
func (db *blobs) BlobSize(ctx context.Context, digest string) (int64, error) {
	var size int64
	err := db.sql.QueryRowContext(ctx, `SELECT size FROM blobs WHERE digest = ?`, digest).Scan(&size)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("read blob %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("read blob %s: %w", digest, err)
	}
	return size, nil
}

// Blob reads a whole blob into memory, its chunks in order: for a caller
// that needs all of it and bounds its size first (a release's binary).
func (db *blobs) Blob(ctx context.Context, digest string) ([]byte, error) {
	size, err := db.BlobSize(ctx, digest)
	if err != nil {
		return nil, err
	}
	if size == 0 {
		return []byte{}, nil
	}
	data, _, err := db.BlobChunk(ctx, digest, 0, size)
	return data, err
}

// BlobChunk reads up to n bytes of a whole blob from offset, and its size,
// reading only the chunks that hold them. Past the end it returns no bytes.
func (db *blobs) BlobChunk(ctx context.Context, digest string, offset, n int64) ([]byte, int64, error) {
	fail := func(err error) ([]byte, int64, error) {
		return nil, 0, fmt.Errorf("read blob %s at %d: %w", digest, offset, err)
	}
	if offset < 0 || n <= 0 {
		return fail(fmt.Errorf("the range %d+%d is not one", offset, n))
	}
	var size int64
	err := db.sql.QueryRowContext(ctx, `SELECT size FROM blobs WHERE digest = ?`, digest).Scan(&size)
	if errors.Is(err, sql.ErrNoRows) {
		return fail(ErrNotFound)
	}
	if err != nil {
		return fail(err)
	}
	if offset >= size {
		return []byte{}, size, nil
	}
	end := min(offset+n, size)
	// The chunks that overlap [offset, end): the last that starts at or
	// before offset, and those that start before end. Each is cut in SQL
	// to the part wanted.
	rows, err := db.sql.QueryContext(ctx, `SELECT start, substr(data, max(?1 - start, 0) + 1, ?2 - max(start, ?1)) FROM blob_chunks
		WHERE digest = ?3 AND start < ?2 AND start >= coalesce((SELECT max(start) FROM blob_chunks WHERE digest = ?3 AND start <= ?1), 0)
		ORDER BY start`, offset, end, digest)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	data := make([]byte, 0, end-offset)
	for rows.Next() {
		var start int64
		var part []byte
		if err := rows.Scan(&start, &part); err != nil {
			return fail(err)
		}
		if want := offset + int64(len(data)); max(start, offset) != want {
			return fail(fmt.Errorf("the stored chunks leave a gap at %d", want))
		}
		data = append(data, part...)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if int64(len(data)) != end-offset {
		return fail(fmt.Errorf("the stored chunks hold %d bytes from %d where the blob's size %d says %d", len(data), offset, size, end-offset))
	}
	return data, size, nil
}
