package mesh

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// TestBlobUploadInChunks: blob.put takes a blob in order, one chunk at a
// time into the store, and makes it whole only at its last chunk, whose
// digest it verifies. Each wrong call is the caller's mistake, says to
// start again at 0 where that is the way on, and keeps nothing it should
// not: bytes that hash to another digest are dropped, and the same digest
// uploads afterwards.
func TestBlobUploadInChunks(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789abcdef"), (2*spec.BlobChunk+100)/16)
	digest, size := spec.ContentDigest(data), int64(len(data))
	put := func(offset int64, b []byte) (spec.BlobPutResult, error) {
		return c.blobs.putBlob(ctx, spec.BlobPutRequest{Digest: digest, Size: size, Offset: offset, Data: b})
	}
	chunk := func(i int) []byte { return data[i*spec.BlobChunk : min((i+1)*spec.BlobChunk, len(data))] }
	wantCaller := func(what string, err error, says string) {
		t.Helper()
		if spec.KindOf(err) != spec.ReplyCaller || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v (%s), want the caller's mistake saying %q", what, err, spec.KindOf(err), says)
		}
	}

	if _, err := c.blobs.putBlob(ctx, spec.BlobPutRequest{Digest: "sha256:XYZ", Size: 1, Data: []byte("x")}); err == nil {
		t.Error("a malformed digest was taken")
	} else {
		wantCaller("a malformed digest", err, "64 lowercase hex digits")
	}
	_, err := put(spec.BlobChunk, chunk(1))
	wantCaller("a chunk before any upload began", err, "start again at 0")

	// Bytes that hash to another digest: refused at the last chunk and
	// nothing kept.
	if res, err := put(0, chunk(0)); err != nil || res.Complete {
		t.Fatalf("first chunk: %+v, %v", res, err)
	}
	if _, err := put(spec.BlobChunk, chunk(1)); err != nil {
		t.Fatal(err)
	}
	_, err = put(2*spec.BlobChunk, bytes.ToUpper(chunk(2)))
	wantCaller("bytes of another digest", err, "the bytes received hash to")
	if has, _ := db.HasBlob(ctx, digest); has {
		t.Fatal("a blob whose bytes hash to another digest was kept")
	}
	if _, err := db.UploadOf(ctx, digest); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the refused upload is still under way: %v", err)
	}

	// A chunk out of order, then one at 0 again: the upload starts over.
	if _, err := put(0, chunk(0)); err != nil {
		t.Fatal(err)
	}
	_, err = put(2*spec.BlobChunk, chunk(2))
	wantCaller("a chunk past what was received", err, "does not follow what was received")
	_, err = c.blobs.putBlob(ctx, spec.BlobPutRequest{Digest: digest, Size: size + 1, Offset: spec.BlobChunk, Data: chunk(1)})
	wantCaller("a chunk of another size", err, "its upload began with")
	for i := range 3 {
		res, err := put(int64(i*spec.BlobChunk), chunk(i))
		if err != nil || res.Complete != (i == 2) {
			t.Fatalf("chunk %d: %+v, %v", i, res, err)
		}
	}
	if got, _, err := db.BlobChunk(ctx, digest, 0, size); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the blob reads back as %d bytes, %v", len(got), err)
	}
	// Uploaded again: whole at once, the rest not sent.
	if res, err := put(0, chunk(0)); err != nil || !res.Complete {
		t.Errorf("uploading a whole blob again: %+v, %v; want complete", res, err)
	}

	// An upload abandoned for longer than UploadIdle is dropped when the
	// next one begins.
	other := bytes.Repeat([]byte("x"), 100)
	od := spec.ContentDigest(other)
	if _, err := c.blobs.putBlob(ctx, spec.BlobPutRequest{Digest: od, Size: 100, Data: other[:50]}); err != nil {
		t.Fatal(err)
	}
	clk.Add(UploadIdle + time.Minute)
	if _, err := c.blobs.putBlob(ctx, spec.BlobPutRequest{Digest: spec.ContentDigest([]byte("y")), Size: 1, Data: []byte("y")}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UploadOf(ctx, od); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an upload idle for over %v was kept: %v", UploadIdle, err)
	}
}
