package journal_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// An upload's chunks are kept beside the log, not in it: the log's
// entries stay small whatever the blob's size, and a view rebuilt from
// the log reads the blob whole, fetching its chunks.
func TestUploadChunksKeptBesideTheLog(t *testing.T) {
	t.Parallel()
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
	blob, digest := upload(t, v, 3*spec.BlobChunk+1000, at)
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

// A compaction deletes the chunks its snapshot holds, and a view rebuilt
// from the compacted log reads the blob whole.
func TestCompactionDropsTheChunksItHolds(t *testing.T) {
	t.Parallel()
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
	cfg := journal.Config{Bucket: "compacted", CompactEntries: 20, CompactEvery: time.Nanosecond, ChunkKeep: time.Nanosecond}
	v, stop := runningWith(t, path, connect, cfg)
	blob, digest := upload(t, v, 3*spec.BlobChunk+1000, at)
	chunks := func() int {
		obs, err := js.ObjectStore(ctx, cfg.Bucket+"-blobs")
		if err != nil {
			t.Fatal(err)
		}
		infos, err := obs.List(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		return len(infos)
	}
	if n := chunks(); n != 4 {
		t.Fatalf("%d chunks kept beside the log after an upload of 4", n)
	}
	for i := range 40 {
		if err := v.Audit(ctx, store.AuditEntry{At: at, Operator: "op", Verb: fmt.Sprint("after", i), Args: "{}", Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 30*time.Second, "the chunks dropped by a compaction", func() error {
		n := chunks()
		if n == 0 {
			return nil
		}
		return fmt.Errorf("%d chunks kept", n)
	})
	stop()
	v, stop = rebuilt(t, path, connect, cfg)
	if got, err := v.Blob(ctx, digest); err != nil || !bytes.Equal(got, blob) {
		t.Fatalf("rebuilt, blob: %d bytes, %v; want the %d bytes put", len(got), err, len(blob))
	}
	stop()
}

// upload uploads a blob of size bytes through v, chunk by chunk, and
// returns it and its digest.
func upload(t *testing.T, v *journal.View, size int, at time.Time) ([]byte, string) {
	t.Helper()
	ctx := context.Background()
	blob := make([]byte, size)
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
	return blob, digest
}
