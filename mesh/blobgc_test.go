package mesh

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// putBlobChunks uploads data as the CLI does, chunk by chunk.
func putBlobChunks(t *testing.T, c *Controller, data []byte) string {
	t.Helper()
	digest := spec.ContentDigest(data)
	for off := 0; off < len(data); off += spec.BlobChunk {
		req := spec.BlobPutRequest{Digest: digest, Size: int64(len(data)), Offset: int64(off), Data: data[off:min(off+spec.BlobChunk, len(data))]}
		res, err := c.blobs.putBlob(context.Background(), req)
		if err != nil {
			t.Fatalf("put blob %s at %d: %v", digest, off, err)
		}
		if res.Complete {
			break
		}
	}
	return digest
}

// fileModule is module name at version holding one file at path whose
// content is the blob digest of size bytes, or nothing when digest is "".
func fileModule(name, version, path, digest string, size int) spec.Module {
	m := spec.Module{Name: name, Version: version}
	if digest != "" {
		m.Resources = []spec.Resource{{Name: spec.ResourceName(name, spec.KindFile, path), Kind: spec.KindFile, Module: name,
			Spec: &spec.FileSpec{Path: path, Mode: 0o644, Blob: true, Size: int64(size), Digest: digest}}}
	}
	return m
}

// TestUnusedBlobsAreCollected: a module's big file is a blob kept while a
// module names it or a node's last declaration does, and collected (with
// an audit entry and the counters on /metrics) once neither does: a
// version replaced by register keeps its blob until a push replaces the
// declaration that names it; a module removed while a node's last
// declaration names its blob keeps it until a push replaces that; a blob
// uploaded moments ago is kept though nothing names it yet (its register
// follows); and a register that replaces a version sets a collection off
// without waiting for the timer.
func TestUnusedBlobsAreCollected(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	has := func(digest string) bool {
		t.Helper()
		ok, err := db.HasBlob(ctx, digest)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	register := func(m spec.Module) {
		t.Helper()
		if _, err := c.modules.registerModules(ctx, spec.ModuleRegisterRequest{Modules: []spec.Module{m}}); err != nil {
			t.Fatal(err)
		}
	}
	push := func() {
		t.Helper()
		res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}})
		if err != nil || len(res.Nodes) != 1 || res.Nodes[0].Error != "" {
			t.Fatalf("push: %+v, %v", res, err)
		}
	}
	collect := func() {
		t.Helper()
		if err := c.blobs.collectBlobs(ctx); err != nil {
			t.Fatal(err)
		}
	}
	big := func(what string) []byte { return bytes.Repeat([]byte(what+"\n"), 3*spec.BlobChunk/len(what)) }
	v1, v2 := big("version 1 of the big file"), big("version 2 of the big file")

	a := putBlobChunks(t, c, v1)
	register(fileModule("m", "1", "/srv/big", a, len(v1)))
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "m", Node: "alpha"}); err != nil {
		t.Fatal(err)
	}
	push()
	clk.Add(BlobGrace + time.Minute)
	b := putBlobChunks(t, c, v2)
	register(fileModule("m", "2", "/srv/big", b, len(v2)))
	collect()
	if !has(a) || !has(b) {
		t.Fatalf("v1 replaced but not pushed: v1's blob kept %v, v2's kept %v; want both (alpha's last declaration names v1's)", has(a), has(b))
	}
	push()
	collect()
	if has(a) {
		t.Fatal("v1's blob is kept after the push replaced the declaration that named it")
	}
	if !has(b) {
		t.Fatal("v2's blob, which module m and alpha's declaration name, was collected")
	}
	if n, _, err := db.BlobChunk(ctx, a, 0, 1); err == nil {
		t.Fatalf("v1's blob still serves bytes: %q", n)
	}

	// Unassigned and removed, m no longer names v2's blob, but alpha's
	// last declaration does until a push replaces it.
	if _, err := c.modules.unassign(ctx, spec.AssignRequest{Module: "m", Node: "alpha"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.modules.removeModule(ctx, spec.ModuleRemoveRequest{Name: "m"}); err != nil {
		t.Fatal(err)
	}
	clk.Add(BlobGrace + time.Minute)
	collect()
	if !has(b) {
		t.Fatal("v2's blob was collected while alpha's last declaration names it")
	}
	push()
	collect()
	if has(b) {
		t.Fatal("v2's blob is kept after nothing names it")
	}

	// Just uploaded, named by nothing yet: kept for the register to come.
	fresh := big("uploaded, its register to come")
	d := putBlobChunks(t, c, fresh)
	collect()
	if !has(d) {
		t.Fatal("a blob uploaded moments ago was collected before its register")
	}
	// Offered again an hour on (the CLI finds it whole): kept as long again.
	clk.Add(BlobGrace - time.Minute)
	putBlobChunks(t, c, fresh)
	clk.Add(2 * time.Minute)
	collect()
	if !has(d) {
		t.Fatal("a blob offered again moments ago was collected")
	}

	// A register that replaces a version sets a collection off at once.
	register(fileModule("x", "1", "/srv/x", d, len(fresh)))
	clk.Add(BlobGrace + time.Minute)
	register(fileModule("x", "2", "/srv/x", "", 0))
	poll.Until(t, 10*time.Second, "the replaced version's blob collected without the timer", func() error {
		if !has(d) {
			return nil
		}
		return errors.New("still stored")
	})

	if n := metric(t, c, "mesh_blobs_collected_total"); n != 3 {
		t.Errorf("mesh_blobs_collected_total = %d, want 3", n)
	}
	if n := metric(t, c, "mesh_blob_bytes_collected_total"); n != len(v1)+len(v2)+len(fresh) {
		t.Errorf("mesh_blob_bytes_collected_total = %d, want %d", n, len(v1)+len(v2)+len(fresh))
	}
	entries, err := db.AuditSince(ctx, time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var collected []store.AuditEntry
	for _, e := range entries {
		if e.Verb == "blob.collect" {
			collected = append(collected, e)
		}
	}
	if len(collected) != 3 || !strings.Contains(collected[0].Args, a) || !strings.Contains(collected[1].Args, b) || !strings.Contains(collected[2].Args, d) {
		t.Errorf("audit of the collections: %+v; want three, naming v1's, v2's and the replaced blob in turn", collected)
	}
}
