package mesh

import (
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// UploadIdle is how long an upload may receive nothing before the next
// upload to begin drops it (and what it received): its caller went away.
const UploadIdle = time.Hour

// MaxBlob is the largest blob the controller takes.
const MaxBlob = 1 << 30

// putBlob takes one chunk of an upload. Each chunk is stored as it arrives,
// with the running SHA-256 of what was received, so the controller holds one
// chunk and never the blob; the last one is verified against the digest
// and makes the blob whole in the same transaction. A chunk at 0 starts
// the upload again (a caller that failed half-way and tries again).
func (bs *blobs) putBlob(ctx context.Context, req spec.BlobPutRequest) (spec.BlobPutResult, error) {
	if req.Size <= 0 || req.Size > MaxBlob {
		return spec.BlobPutResult{}, callerError(fmt.Sprintf("blob %s: size %d is not from 1 byte to 1 GiB", req.Digest, req.Size))
	}
	if !isContentDigest(req.Digest) {
		return spec.BlobPutResult{}, callerError(fmt.Sprintf("blob %q: a digest is sha256: and 64 lowercase hex digits", req.Digest))
	}
	// A blob stored already is touched: the collector of unused blobs
	// leaves it while the register or publish that names it follows.
	if has, err := bs.db.TouchBlob(ctx, req.Digest, bs.now()); err != nil {
		return spec.BlobPutResult{}, err
	} else if has {
		return spec.BlobPutResult{Complete: true}, nil
	}
	bs.uploadsMu.Lock()
	defer bs.uploadsMu.Unlock()
	now := bs.now()
	if req.Offset == 0 {
		if n, err := bs.db.DropUploadsBefore(ctx, now.Add(-UploadIdle)); err != nil {
			return spec.BlobPutResult{}, err
		} else if n > 0 {
			bs.log.Info("abandoned blob uploads dropped", "uploads", n, "idle", UploadIdle)
		}
		began, err := bs.db.BeginUpload(ctx, req.Digest, req.Size, now)
		if err != nil {
			return spec.BlobPutResult{}, err
		}
		if !began {
			return spec.BlobPutResult{Complete: true}, nil
		}
	}
	restart := func(why string) (spec.BlobPutResult, error) {
		return spec.BlobPutResult{}, callerError(fmt.Sprintf("blob %s: %s; start again at 0", req.Digest, why))
	}
	u, err := bs.db.UploadOf(ctx, req.Digest)
	if errors.Is(err, store.ErrNotFound) {
		return restart(fmt.Sprintf("chunk at %d does not follow what was received (no upload of it is under way)", req.Offset))
	}
	if err != nil {
		return spec.BlobPutResult{}, err
	}
	switch end := req.Offset + int64(len(req.Data)); {
	case u.Size != req.Size:
		return restart(fmt.Sprintf("chunk at %d says the blob has %d bytes, its upload began with %d", req.Offset, req.Size, u.Size))
	case u.Received != req.Offset:
		return restart(fmt.Sprintf("chunk at %d does not follow what was received (%d bytes)", req.Offset, u.Received))
	case len(req.Data) == 0:
		return restart(fmt.Sprintf("chunk at %d holds no bytes", req.Offset))
	case end > req.Size:
		if err := bs.db.DropUpload(ctx, req.Digest); err != nil {
			return spec.BlobPutResult{}, err
		}
		return restart(fmt.Sprintf("more than its %d bytes", req.Size))
	}
	h, err := resumeHash(u.Hash)
	if err != nil {
		return spec.BlobPutResult{}, fmt.Errorf("blob %s: the upload's running hash: %w", req.Digest, err)
	}
	h.Write(req.Data)
	whole := req.Offset+int64(len(req.Data)) == req.Size
	if whole {
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != req.Digest {
			if err := bs.db.DropUpload(ctx, req.Digest); err != nil {
				return spec.BlobPutResult{}, err
			}
			return spec.BlobPutResult{}, callerError(fmt.Sprintf("blob %s: the bytes received hash to %s; nothing was kept", req.Digest, got))
		}
	}
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return spec.BlobPutResult{}, fmt.Errorf("blob %s: the upload's running hash: %w", req.Digest, err)
	}
	if err := bs.db.PutUploadChunk(ctx, req.Digest, req.Offset, req.Data, state, whole, now); err != nil {
		if errors.Is(err, store.ErrUploadOrder) {
			return restart(err.Error())
		}
		return spec.BlobPutResult{}, err
	}
	return spec.BlobPutResult{Complete: whole}, nil
}

// resumeHash is a SHA-256 that continues from state (empty: from nothing).
func resumeHash(state []byte) (hash.Hash, error) {
	h := sha256.New()
	if len(state) == 0 {
		return h, nil
	}
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		return nil, err
	}
	return h, nil
}

// isContentDigest says whether d is a digest as spec.ContentDigest writes
// one.
func isContentDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 64 {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil && strings.ToLower(hexPart) == hexPart
}
