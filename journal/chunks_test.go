package journal_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// An upload's chunks are kept beside the log, not in it: the log's
// entries stay small whatever the blob's size, and a view rebuilt from
// the log reads the blob whole, fetching its chunks.
func TestUploadChunksKeptBesideTheLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.db")
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	connect := startBus(t, filepath.Join(dir, "js"))
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, stop := running(t, path, connect)

	blob := make([]byte, 3*spec.BlobChunk+1000)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	sum := sha256.Sum256(blob)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if began, err := v.BeginUpload(ctx, digest, int64(len(blob)), at); err != nil || !began {
		t.Fatalf("BeginUpload = %v, %v", began, err)
	}
	h := sha256.New()
	for off := 0; off < len(blob); off += spec.BlobChunk {
		chunk := blob[off:min(off+spec.BlobChunk, len(blob))]
		h.Write(chunk)
		state, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
		whole := off+len(chunk) == len(blob)
		if err := v.PutUploadChunk(ctx, digest, int64(off), chunk, state, whole, at); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, v *journal.View) {
		t.Helper()
		got, err := v.Blob(ctx, digest)
		if err != nil || !bytes.Equal(got, blob) {
			t.Fatalf("%s, blob: %d bytes, %v; want the %d bytes put", when, len(got), err, len(blob))
		}
	}
	check("written", v)
	stop()
	if s := logState(t, js, journal.DefaultBucket); s.Bytes > uint64(len(blob)/4) {
		t.Fatalf("the log holds %d bytes after a %d byte upload; its chunks are in it", s.Bytes, len(blob))
	}
	v, stop = rebuilt(t, path, connect, journal.Config{})
	check("rebuilt", v)
	stop()
}
