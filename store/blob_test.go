package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// patterned is n bytes that differ at every offset a test reads.
func patterned(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// upload sends data to db as an upload in chunks of the sizes given (the
// last repeated), as the controller does: the running hash kept with each.
func upload(t *testing.T, db *store.DB, data []byte, sizes ...int) string {
	t.Helper()
	ctx := context.Background()
	digest := spec.ContentDigest(data)
	if began, err := db.BeginUpload(ctx, digest, int64(len(data)), time.Now()); err != nil || !began {
		t.Fatalf("BeginUpload: %v, %v", began, err)
	}
	h := sha256.New()
	for off, i := 0, 0; off < len(data); i++ {
		n := min(sizes[min(i, len(sizes)-1)], len(data)-off)
		h.Write(data[off : off+n])
		state, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
		if err := db.PutUploadChunk(ctx, digest, int64(off), data[off:off+n], state, off+n == len(data), time.Now()); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	return digest
}

// TestBlobChunksServeAnyRange: a blob stored as an upload's chunks of
// uneven sizes (and one stored by PutBlob) serves every range exactly:
// within a chunk, across several, at the end and past it.
func TestBlobChunksServeAnyRange(t *testing.T) {
	t.Parallel()
	db, _ := openTemp(t)
	ctx := context.Background()
	data := patterned(3*spec.BlobChunk + 1234)
	uneven := upload(t, db, data, 1000, spec.BlobChunk, 77, spec.BlobChunk)
	whole := data[:2*spec.BlobChunk+5]
	put := spec.ContentDigest(whole)
	if err := db.PutBlob(ctx, put, whole, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what      string
		digest    string
		data      []byte
		offset, n int64
	}{
		{"the first bytes, inside the first chunk", uneven, data, 0, 10},
		{"across the first three chunks", uneven, data, 500, 2000},
		{"a chunk's worth from an odd offset", uneven, data, 999, spec.BlobChunk},
		{"the last bytes, asked past the end", uneven, data, int64(len(data)) - 5, spec.BlobChunk},
		{"past the end", uneven, data, int64(len(data)), spec.BlobChunk},
		{"all of it at once", uneven, data, 0, int64(len(data))},
		{"PutBlob's chunks, across a boundary", put, whole, spec.BlobChunk - 3, 10},
		{"PutBlob's last chunk", put, whole, 2 * spec.BlobChunk, spec.BlobChunk},
	} {
		got, size, err := db.BlobChunk(ctx, tc.digest, tc.offset, tc.n)
		if err != nil {
			t.Errorf("%s: %v", tc.what, err)
			continue
		}
		end := min(tc.offset+tc.n, int64(len(tc.data)))
		want := tc.data[min(tc.offset, end):end]
		if size != int64(len(tc.data)) || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes of a blob of %d, want %d of %d", tc.what, len(got), size, len(want), len(tc.data))
		}
	}
	if _, _, err := db.BlobChunk(ctx, spec.ContentDigest([]byte("none")), 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a blob never stored: %v, want not found", err)
	}
}

// TestUploadContinuesAfterRestart: an upload received in part survives the
// store's close and opening again with its running hash, takes its next
// chunk, and is whole only with its last; a chunk out of order is refused
// and changes nothing; a blob under way is not served.
func TestUploadContinuesAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mesh.db")
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	data := patterned(2*spec.BlobChunk + 10)
	digest := spec.ContentDigest(data)
	if _, err := db.BeginUpload(ctx, digest, int64(len(data)), time.Now()); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	h.Write(data[:spec.BlobChunk])
	state, _ := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err := db.PutUploadChunk(ctx, digest, 0, data[:spec.BlobChunk], state, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what   string
		offset int64
		data   []byte
		whole  bool
	}{
		{"the first chunk again", 0, data[:spec.BlobChunk], false},
		{"a chunk past what was received", 2 * spec.BlobChunk, data[2*spec.BlobChunk:], true},
		{"more than the blob holds", spec.BlobChunk, append(bytes.Clone(data[spec.BlobChunk:]), 0), true},
		{"no bytes", spec.BlobChunk, nil, false},
		{"the last chunk, said not to be", spec.BlobChunk, data[spec.BlobChunk:], false},
	} {
		if err := db.PutUploadChunk(ctx, digest, tc.offset, tc.data, []byte("x"), tc.whole, time.Now()); !errors.Is(err, store.ErrUploadOrder) {
			t.Errorf("%s: %v, want ErrUploadOrder", tc.what, err)
		}
	}
	if _, _, err := db.BlobChunk(ctx, digest, 0, 10); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a blob under way is served: %v", err)
	}
	db.Close()

	db, err = store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	u, err := db.UploadOf(ctx, digest)
	if err != nil || u.Received != spec.BlobChunk || !bytes.Equal(u.Hash, state) || u.Size != int64(len(data)) {
		t.Fatalf("the upload after a restart: %+v, %v; want %d received and the hash kept", u, err, spec.BlobChunk)
	}
	h2 := sha256.New()
	if err := h2.(encoding.BinaryUnmarshaler).UnmarshalBinary(u.Hash); err != nil {
		t.Fatal(err)
	}
	h2.Write(data[spec.BlobChunk:])
	if got := fmt.Sprintf("sha256:%x", h2.Sum(nil)); got != digest {
		t.Fatalf("the kept running hash continued gives %s, want %s", got, digest)
	}
	if err := db.PutUploadChunk(ctx, digest, spec.BlobChunk, data[spec.BlobChunk:], nil, true, time.Now()); err != nil {
		t.Fatal(err)
	}
	if has, err := db.HasBlob(ctx, digest); err != nil || !has {
		t.Fatalf("the completed upload is not a blob: %v %v", has, err)
	}
	if _, err := db.UploadOf(ctx, digest); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the upload is still under way once whole: %v", err)
	}
	// Beginning it again finds it whole, and leaves it so.
	if began, err := db.BeginUpload(ctx, digest, int64(len(data)), time.Now()); err != nil || began {
		t.Errorf("BeginUpload of a whole blob: %v, %v; want false", began, err)
	}
	if got, _, err := db.BlobChunk(ctx, digest, 0, int64(len(data))); err != nil || !bytes.Equal(got, data) {
		t.Errorf("the whole blob reads back as %d bytes, %v", len(got), err)
	}
}

// TestAbandonedUploadIsDropped: an upload idle since before the cut-off is
// dropped with what it received, a recent one and a whole blob are not,
// and the same digest can be uploaded again afterwards.
func TestAbandonedUploadIsDropped(t *testing.T) {
	t.Parallel()
	db, path := openTemp(t)
	ctx := context.Background()
	kept := patterned(100)
	keptDigest := upload(t, db, kept, 100)
	old, recent := patterned(3000), patterned(3001)
	t0 := time.Now()
	for _, u := range []struct {
		data []byte
		at   time.Time
	}{{old, t0.Add(-2 * time.Hour)}, {recent, t0}} {
		d := spec.ContentDigest(u.data)
		if _, err := db.BeginUpload(ctx, d, int64(len(u.data)), u.at); err != nil {
			t.Fatal(err)
		}
		if err := db.PutUploadChunk(ctx, d, 0, u.data[:1000], []byte("state"), false, u.at); err != nil {
			t.Fatal(err)
		}
	}
	n, err := db.DropUploadsBefore(ctx, t0.Add(-time.Hour))
	if err != nil || n != 1 {
		t.Fatalf("DropUploadsBefore: %d, %v; want 1", n, err)
	}
	if _, err := db.UploadOf(ctx, spec.ContentDigest(old)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the abandoned upload is still there: %v", err)
	}
	if u, err := db.UploadOf(ctx, spec.ContentDigest(recent)); err != nil || u.Received != 1000 {
		t.Errorf("the recent upload: %+v, %v", u, err)
	}
	if got := chunkDigests(t, path); len(got) != 2 || got[0] > got[1] {
		t.Errorf("chunks kept for %v, want only the whole blob's and the recent upload's", got)
	} else if !(got[0] == keptDigest || got[1] == keptDigest) {
		t.Errorf("the whole blob's chunks went: %v", got)
	}
	upload(t, db, old, 1000)
	if got, _, err := db.BlobChunk(ctx, spec.ContentDigest(old), 0, 5000); err != nil || !bytes.Equal(got, old) {
		t.Errorf("uploaded again after it was dropped: %d bytes, %v", len(got), err)
	}
	if err := db.DropUpload(ctx, keptDigest); err != nil {
		t.Fatal(err)
	}
	if got, _, err := db.BlobChunk(ctx, keptDigest, 0, 100); err != nil || !bytes.Equal(got, kept) {
		t.Errorf("DropUpload of a whole blob took its bytes: %d, %v", len(got), err)
	}
}

// chunkDigests are the digests blob_chunks holds rows of, read through a
// connection of its own.
func chunkDigests(t *testing.T, path string) []string {
	t.Helper()
	raw, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	rows, err := raw.Query(`SELECT DISTINCT digest FROM blob_chunks`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ds []string
	for rows.Next() {
		var d string
		rows.Scan(&d)
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// TestBlobStoredBeforeChunksIsServed: a store whose blobs were one value
// each (the migrations before blob_chunks) keeps every blob through it, and
// serves its ranges.
func TestBlobStoredBeforeChunksIsServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "mesh.db")
	raw, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	names, _ := filepath.Glob("migrations/*.sql")
	sort.Strings(names)
	for i, name := range names {
		if strings.HasSuffix(name, "_blob_chunks.sql") {
			names = names[:i]
			break
		}
	}
	for i, name := range names {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(string(body)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := raw.Exec(`INSERT INTO schema_migrations VALUES (?, ?, '')`, i+1, filepath.Base(name)); err != nil {
			t.Fatal(err)
		}
	}
	data := patterned(spec.BlobChunk + 99)
	digest := spec.ContentDigest(data)
	if _, err := raw.Exec(`INSERT INTO blobs (digest, size, data) VALUES (?, ?, ?)`, digest, len(data), data); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, off := range []int64{0, 1000, spec.BlobChunk} {
		got, size, err := db.BlobChunk(ctx, digest, off, spec.BlobChunk)
		end := min(off+spec.BlobChunk, int64(len(data)))
		if err != nil || size != int64(len(data)) || !bytes.Equal(got, data[off:end]) {
			t.Errorf("at %d: %d bytes of %d, %v", off, len(got), size, err)
		}
	}
}
