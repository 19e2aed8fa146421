package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// A blob is used while anything may still ask for it:
//
//   - a registered module names it (what a push composes now: the pending
//     declarations of the nodes it is assigned to);
//   - a node's last declaration sent names it (the only blobs the node may
//     fetch, until a push replaces that declaration);
//   - a published release is its bytes (nothing unpublishes one).
//
// An unused blob is collected once it has not been touched (made whole,
// or offered again by an upload) since a time the caller gives: an upload
// comes before the register or publish that names it, and must not be
// collected in between. Uploads under way are not blobs yet; they have
// their own end (DropUploadsBefore).

// CollectedBlob is a blob the collector deleted.
type CollectedBlob struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// maxAuditedBlobs bounds the digests one collection's audit entry lists;
// its count and bytes cover them all.
const maxAuditedBlobs = 100

// collector finds and drops the blobs nothing holds.
type collector struct{ *core }

// CollectBlobs deletes, in one transaction, every blob that no module, no
// node's last declaration and no release names and that was last touched
// before before, with its chunks; the same transaction records an audit
// entry (at, by "controller", verb blob.collect) naming what went, when
// anything did. It returns what it deleted. A stored module or
// declaration that cannot be read fails the collection, deleting nothing:
// a read that failed never makes a blob unused.
func (db *collector) CollectBlobs(ctx context.Context, before, at time.Time) ([]CollectedBlob, error) {
	var gone []CollectedBlob
	err := db.tx(ctx, func(tx *sql.Tx) error {
		gone = nil
		candidates, err := unreleasedBefore(ctx, tx, before)
		if err != nil || len(candidates) == 0 {
			return err
		}
		if err := dropNamedByModules(ctx, tx, candidates); err != nil {
			return err
		}
		for digest, size := range candidates {
			// A declaration's body is its signed JSON, where a digest is
			// a string as written: one whose body holds the digest's text
			// keeps the blob. (That can keep one a declaration merely
			// mentions, never drop one it names.)
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM declarations WHERE instr(CAST(body AS TEXT), ?) > 0`, digest).Scan(&n); err != nil {
				return fmt.Errorf("read the declarations that name blob %s: %w", digest, err)
			}
			if n == 0 {
				gone = append(gone, CollectedBlob{Digest: digest, Size: size})
			}
		}
		if len(gone) == 0 {
			return nil
		}
		slices.SortFunc(gone, func(a, b CollectedBlob) int { return strings.Compare(a.Digest, b.Digest) })
		var bytes int64
		for _, b := range gone {
			if _, err := tx.ExecContext(ctx, `DELETE FROM blob_chunks WHERE digest = ?`, b.Digest); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM blobs WHERE digest = ?`, b.Digest); err != nil {
				return err
			}
			bytes += b.Size
		}
		args, err := json.Marshal(struct {
			Count int             `json:"count"`
			Bytes int64           `json:"bytes"`
			Blobs []CollectedBlob `json:"blobs"`
		}{Count: len(gone), Bytes: bytes, Blobs: gone[:min(len(gone), maxAuditedBlobs)]})
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO audit (at, operator, verb, args, outcome) VALUES (?, ?, ?, ?, ?)`,
			auditTime(at), "controller", "blob.collect", string(args), "ok")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("collect unused blobs: %w", err)
	}
	return gone, nil
}

// unreleasedBefore are the blobs last touched before before that no
// release is, with their sizes.
func unreleasedBefore(ctx context.Context, tx *sql.Tx, before time.Time) (map[string]int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT digest, size FROM blobs WHERE touched_at < ? AND digest NOT IN (SELECT blob FROM releases)`, auditTime(before))
	if err != nil {
		return nil, fmt.Errorf("read the blobs: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var digest string
		var size int64
		if err := rows.Scan(&digest, &size); err != nil {
			return nil, fmt.Errorf("read the blobs: %w", err)
		}
		out[digest] = size
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the blobs: %w", err)
	}
	return out, nil
}

// dropNamedByModules removes from candidates every blob a registered
// module names, each module read whole as it is stored.
func dropNamedByModules(ctx context.Context, tx *sql.Tx, candidates map[string]int64) error {
	rows, err := tx.QueryContext(ctx, `SELECT name, body FROM modules`)
	if err != nil {
		return fmt.Errorf("read the modules: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, body string
		if err := rows.Scan(&name, &body); err != nil {
			return fmt.Errorf("read the modules: %w", err)
		}
		var m spec.Module
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			return fmt.Errorf("read module %q: %w", name, err)
		}
		for digest := range m.Blobs() {
			delete(candidates, digest)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the modules: %w", err)
	}
	return nil
}

// TouchBlob marks a whole blob as touched at (offered again by an upload),
// so the collector leaves it for a while. It reports whether the blob is
// stored whole.
func (db *collector) TouchBlob(ctx context.Context, digest string, at time.Time) (bool, error) {
	var touched bool
	err := db.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE blobs SET touched_at = ? WHERE digest = ?`, auditTime(at), digest)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		touched = n > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("touch blob %s: %w", digest, err)
	}
	return touched, nil
}
