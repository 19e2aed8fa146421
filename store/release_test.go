package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// TestReleases: a release is recorded once over its stored blob, listed in
// the order published and paged; a release whose blob is not stored (or is
// of another size) is refused, and a second publish of a digest is
// ErrExists with the release as it was, changing nothing.
func TestReleases(t *testing.T) {
	t.Parallel()
	db, path := openTemp(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	v1 := store.Release{Digest: "aa11", GOOS: "linux", GOARCH: "amd64", Go: "go1.26.8", Size: 3, Published: at}
	v2 := store.Release{Digest: "bb22", GOOS: "linux", GOARCH: "arm64", Go: "go1.26.8", Size: 4, Published: at.Add(time.Minute)}

	if _, err := db.PublishRelease(ctx, v1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a release whose blob is not stored: %v, want ErrNotFound", err)
	}
	if err := db.PutBlob(ctx, v1.Blob(), []byte("abc"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.PutBlob(ctx, v2.Blob(), []byte("abc"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PublishRelease(ctx, v2); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a release of 4 bytes over a blob of 3: %v, want ErrNotFound", err)
	}
	rawExec(t, path, `UPDATE blobs SET size = 4 WHERE digest = 'sha256:bb22'`)
	rawExec(t, path, `UPDATE blob_chunks SET data = x'61626364' WHERE digest = 'sha256:bb22'`)
	r1, err := db.PublishRelease(ctx, v1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.PublishRelease(ctx, v2); err != nil {
		t.Fatal(err)
	}
	again := v1
	again.Published, again.GOARCH = at.Add(time.Hour), "arm64"
	kept, err := db.PublishRelease(ctx, again)
	if !errors.Is(err, store.ErrExists) || kept.ID != r1.ID || !kept.Published.Equal(at) || kept.GOARCH != "amd64" {
		t.Errorf("publishing aa11 again = %+v, %v; want ErrExists and the release as first recorded", kept, err)
	}

	all, err := db.Releases(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].Digest != "aa11" || all[1].Digest != "bb22" || all[1].GOARCH != "arm64" || all[1].Size != 4 ||
		!all[0].Published.Equal(at) || all[0].Go != "go1.26.8" {
		t.Fatalf("Releases = %+v, want aa11 then bb22 as published", all)
	}
	page, err := db.Releases(ctx, all[0].ID, 10)
	if err != nil || len(page) != 1 || page[0].Digest != "bb22" {
		t.Errorf("Releases after the first = %+v, %v", page, err)
	}
	if r, err := db.Release(ctx, "bb22"); err != nil || r.ID != all[1].ID {
		t.Errorf("Release(bb22) = %+v, %v", r, err)
	}
	if _, err := db.Release(ctx, "cc33"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Release(cc33) = %v, want ErrNotFound", err)
	}

	// A row the store cannot read is a failure, never "not found".
	rawExec(t, path, `UPDATE releases SET published_at = 'yesterday' WHERE digest = 'bb22'`)
	_, err = db.Release(ctx, "bb22")
	assertFailure(t, "Release(bb22)", err, "read release bb22", "yesterday")
	rs, err := db.Releases(ctx, 0, 10)
	assertFailure(t, "Releases", err, "read releases")
	if rs != nil {
		t.Errorf("Releases returned %d beside an error", len(rs))
	}
}

// TestBlobWholeAndSize: a blob's size reads without its bytes and its
// bytes whole; one not stored is ErrNotFound, and a store that cannot
// answer is a failure, never "not found".
func TestBlobWholeAndSize(t *testing.T) {
	t.Parallel()
	db, _ := openTemp(t)
	ctx := context.Background()
	if err := db.PutBlob(ctx, "sha256:aa", []byte("abcd"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if n, err := db.BlobSize(ctx, "sha256:aa"); err != nil || n != 4 {
		t.Errorf("BlobSize = %d, %v; want 4", n, err)
	}
	if b, err := db.Blob(ctx, "sha256:aa"); err != nil || string(b) != "abcd" {
		t.Errorf("Blob = %q, %v; want abcd", b, err)
	}
	if _, err := db.BlobSize(ctx, "sha256:bb"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BlobSize of a blob not stored: %v, want ErrNotFound", err)
	}
	if _, err := db.Blob(ctx, "sha256:bb"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Blob of a blob not stored: %v, want ErrNotFound", err)
	}
	db.Close()
	_, err := db.BlobSize(ctx, "sha256:aa")
	assertFailure(t, "BlobSize", err, "read blob sha256:aa")
	_, err = db.Blob(ctx, "sha256:aa")
	assertFailure(t, "Blob", err, "read blob sha256:aa")
}
