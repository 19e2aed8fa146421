package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// blobModule is module name at version with one file whose content is the
// blob of data.
func blobModule(name, version string, data []byte) spec.Module {
	return spec.Module{Name: name, Version: version, Resources: []spec.Resource{{
		Name: spec.ResourceName(name, spec.KindFile, "/srv/"+name), Kind: spec.KindFile, Module: name,
		Spec: &spec.FileSpec{Path: "/srv/" + name, Mode: 0o644, Blob: true, Size: int64(len(data)), Digest: spec.ContentDigest(data)},
	}}}
}

// TestCollectBlobs: a collection deletes, with its chunks, exactly the
// blobs nothing names and that were not touched since the cut: never one a
// module names, one a node's last declaration names, a release's, or one
// uploaded (or offered again) after the cut; it records one audit entry
// naming what went, and a second collection finds nothing.
func TestCollectBlobs(t *testing.T) {
	t.Parallel()
	db, path := openTemp(t)
	ctx := context.Background()
	old := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cut := old.Add(time.Hour)
	late := cut.Add(time.Minute)

	blob := func(what string) []byte { return bytes.Repeat([]byte(what+"\n"), spec.BlobChunk/len(what)+1) } // two chunks each
	byModule, byDeclaration, released, unused, uploadedLate, offeredAgain := blob("a module's"), blob("a declaration's"),
		blob("a release's"), blob("unused"), blob("uploaded after the cut"), blob("offered again after the cut")
	for _, b := range [][]byte{byModule, byDeclaration, released, unused, offeredAgain} {
		if err := db.PutBlob(ctx, spec.ContentDigest(b), b, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutBlob(ctx, spec.ContentDigest(uploadedLate), uploadedLate, late); err != nil {
		t.Fatal(err)
	}
	if began, err := db.BeginUpload(ctx, spec.ContentDigest(offeredAgain), int64(len(offeredAgain)), late); err != nil || began {
		t.Fatalf("BeginUpload of a whole blob: %v, %v; want it touched, not begun", began, err)
	}
	if _, err := db.RegisterModules(ctx, []spec.Module{blobModule("m", "1", byModule)}, old); err != nil {
		t.Fatal(err)
	}
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "10.0.0.2", NKey: "UBETA", Joined: old}); err != nil {
		t.Fatal(err)
	}
	decl, _ := json.Marshal(spec.Declaration{Mesh: "m", Node: "beta", Seq: 1, Resources: blobModule("gone", "1", byDeclaration).Resources})
	if err := db.RecordDeclaration(ctx, store.Declaration{Node: "beta", Seq: 1, Body: decl, Sig: []byte("s"), Sent: old, Expires: late}); err != nil {
		t.Fatal(err)
	}
	rel := store.Release{Digest: strings.TrimPrefix(spec.ContentDigest(released), "sha256:"), GOOS: "linux", GOARCH: "amd64", Go: "go1.26.8", Size: int64(len(released)), Published: old}
	if _, err := db.PublishRelease(ctx, rel); err != nil {
		t.Fatal(err)
	}

	gone, err := db.CollectBlobs(ctx, cut, late)
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.CollectedBlob{{Digest: spec.ContentDigest(unused), Size: int64(len(unused))}}; !slices.Equal(gone, want) {
		t.Fatalf("collected %v, want only the unused blob %v", gone, want)
	}
	for _, b := range [][]byte{byModule, byDeclaration, released, uploadedLate, offeredAgain} {
		if data, err := db.Blob(ctx, spec.ContentDigest(b)); err != nil || !bytes.Equal(data, b) {
			t.Errorf("blob %q...: %v after the collection; want it kept whole", b[:20], err)
		}
	}
	if _, err := db.BlobSize(ctx, spec.ContentDigest(unused)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the unused blob: %v, want ErrNotFound", err)
	}
	if n := rawCount(t, path, `SELECT count(*) FROM blob_chunks WHERE digest = '`+spec.ContentDigest(unused)+`'`); n != 0 {
		t.Errorf("%d chunks of the unused blob left", n)
	}
	entries, err := db.AuditSince(ctx, old, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Operator != "controller" || entries[0].Verb != "blob.collect" ||
		!strings.Contains(entries[0].Args, spec.ContentDigest(unused)) || !strings.Contains(entries[0].Args, `"count":1`) {
		t.Fatalf("audit after the collection: %+v; want one blob.collect entry naming the blob", entries)
	}
	if again, err := db.CollectBlobs(ctx, cut, late); err != nil || len(again) != 0 {
		t.Errorf("a second collection: %v, %v; want nothing", again, err)
	}
	if entries, _ := db.AuditSince(ctx, old, 10); len(entries) != 1 {
		t.Errorf("a collection that deleted nothing was audited: %d entries", len(entries))
	}
}

// TestCollectBlobsReadFailureDeletesNothing: a module whose stored body
// cannot be read fails the collection, naming it, and nothing is deleted:
// a read that failed never makes a blob unused.
func TestCollectBlobsReadFailureDeletesNothing(t *testing.T) {
	t.Parallel()
	db, path := openTemp(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	data := []byte("a blob only the broken module names")
	if err := db.PutBlob(ctx, spec.ContentDigest(data), data, at); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RegisterModules(ctx, []spec.Module{blobModule("broken", "1", data)}, at); err != nil {
		t.Fatal(err)
	}
	rawExec(t, path, `UPDATE modules SET body = '{"name": "broken", "resources": [' WHERE name = 'broken'`)
	gone, err := db.CollectBlobs(ctx, at.Add(time.Hour), at.Add(time.Hour))
	if err == nil || !strings.Contains(err.Error(), `module "broken"`) {
		t.Fatalf("collection over an unreadable module: %v, %v; want an error naming it", gone, err)
	}
	if has, err := db.HasBlob(ctx, spec.ContentDigest(data)); err != nil || !has {
		t.Errorf("the blob after a failed collection: %v, %v; want it kept", has, err)
	}
}

// rawCount reads one count through a connection of its own.
func rawCount(t *testing.T, path, query string) int {
	t.Helper()
	raw, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestBlobStoredBeforeTouchedKeepsItsGrace: a blob stored before the store
// kept when blobs were touched counts as touched when the store is opened
// after the upgrade: an upload the controller took before it keeps its
// grace, and is collected after it when nothing names it.
func TestBlobStoredBeforeTouchedKeepsItsGrace(t *testing.T) {
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
		if strings.HasSuffix(name, "_blob_touched.sql") {
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
	data := []byte("uploaded before the upgrade, its register to come")
	digest := spec.ContentDigest(data)
	if _, err := raw.Exec(`INSERT INTO blobs (digest, size) VALUES (?, ?)`, digest, len(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`INSERT INTO blob_chunks (digest, start, data) VALUES (?, 0, ?)`, digest, data); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now()
	if gone, err := db.CollectBlobs(ctx, now.Add(-time.Minute), now); err != nil || len(gone) != 0 {
		t.Fatalf("a collection right after the upgrade: %v, %v; want the blob kept", gone, err)
	}
	if gone, err := db.CollectBlobs(ctx, now.Add(time.Hour), now.Add(time.Hour)); err != nil || len(gone) != 1 || gone[0].Digest != digest {
		t.Fatalf("a collection past its grace: %v, %v; want the blob collected", gone, err)
	}
}
