package mesh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/gobuild"
	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// meshProgram is a program of the mesh's module built for linux/goarch:
// to its build information, a mesh binary.
func meshProgram(t *testing.T, goarch string) []byte {
	t.Helper()
	path := builds.Binary(t, gobuild.Build{Dir: builds.Program(t, release.MainPath), GOOS: "linux", GOARCH: goarch, LDFlags: "-s -w"})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hexDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// upload puts b as a blob, in chunks, as the CLI does.
func upload(t *testing.T, op *nats.Conn, b []byte) {
	t.Helper()
	digest := spec.ContentDigest(b)
	for off := 0; off < len(b); off += spec.BlobChunk {
		end := min(off+spec.BlobChunk, len(b))
		var res spec.BlobPutResult
		if err := callAPI(t, op, spec.BlobPut.Name, spec.BlobPutRequest{Digest: digest, Size: int64(len(b)), Offset: int64(off), Data: b[off:end]}, &res); err != nil {
			t.Fatalf("blob.put at %d: %v", off, err)
		}
		if res.Complete {
			return
		}
	}
}

func releaseList(t *testing.T, op *nats.Conn) []spec.Release {
	t.Helper()
	var res spec.ReleaseListResult
	if err := callAPI(t, op, spec.ReleaseList.Name, spec.ReleaseListRequest{}, &res); err != nil {
		t.Fatal(err)
	}
	return res.Releases
}

// TestPublishRelease: the controller reads the target from the stored
// bytes itself and records the release; publishing it again changes
// nothing. A blob that is not a mesh binary, a digest never uploaded and a
// digest that is not one are each refused with their kind and record
// nothing; every call is audited.
func TestPublishRelease(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	op := operatorConn(t, c)
	amd := meshProgram(t, "amd64")
	upload(t, op, amd)

	var res spec.ReleasePublishResult
	if err := callAPI(t, op, spec.ReleasePublish.Name, spec.ReleasePublishRequest{Digest: hexDigest(amd)}, &res); err != nil {
		t.Fatalf("release.publish: %v", err)
	}
	want := spec.Release{Digest: hexDigest(amd), GOOS: "linux", GOARCH: "amd64", Go: runtime.Version(), Size: int64(len(amd)), Published: clk.Now()}
	if res.Existed || res.Release != want {
		t.Errorf("release.publish = %+v, want %+v, new", res, want)
	}
	if e := lastAudit(t, db); e.Verb != spec.ReleasePublish.Name || e.Outcome != "ok" || !strings.Contains(e.Args, hexDigest(amd)) {
		t.Errorf("the last audit entry is %+v, want the publish", e)
	}
	clk.Add(time.Hour)
	if err := callAPI(t, op, spec.ReleasePublish.Name, spec.ReleasePublishRequest{Digest: hexDigest(amd)}, &res); err != nil || !res.Existed || res.Release != want {
		t.Errorf("publishing again = %+v, %v; want the release as first published, existed", res, err)
	}

	trueBin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	upload(t, op, trueBin)
	for _, tc := range []struct {
		name, digest, kind, says string
	}{
		{"a C program", hexDigest(trueBin), spec.ReplyCaller, "not a Go binary"},
		{"never uploaded", hexDigest([]byte("nothing")), spec.ReplyNotFound, "its binary was not uploaded"},
		{"not a digest", "sha256:" + hexDigest(amd), spec.ReplyCaller, "is not a SHA-256"},
	} {
		err := callAPI(t, op, spec.ReleasePublish.Name, spec.ReleasePublishRequest{Digest: tc.digest}, &res)
		var re *spec.ReplyError
		if !errors.As(err, &re) || re.Kind != tc.kind || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: release.publish = %v, want a %s error saying %q", tc.name, err, tc.kind, tc.says)
		}
		if e := lastAudit(t, db); e.Verb != spec.ReleasePublish.Name || e.Outcome == "ok" {
			t.Errorf("%s: the last audit entry is %+v, want the refused publish", tc.name, e)
		}
	}
	if got := releaseList(t, op); len(got) != 1 || got[0] != want {
		t.Errorf("release.list = %+v, want only %+v", got, want)
	}
}

// blobReadFailing is the real store failing to read a blob's bytes (its
// size still reads).
type blobReadFailing struct {
	*store.DB
	fail atomic.Bool
}

func (s *blobReadFailing) Blob(ctx context.Context, digest string) ([]byte, error) {
	if s.fail.Load() {
		return nil, errors.New("read blob: disk I/O error")
	}
	return s.DB.Blob(ctx, digest)
}

// TestPublishReadFailureIsNoVerdict: a blob the store fails to read is the
// controller's failure, never "not a mesh binary", and records nothing.
func TestPublishReadFailureIsNoVerdict(t *testing.T) {
	t.Parallel()
	var fs *blobReadFailing
	c, _ := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store {
		fs = &blobReadFailing{DB: db}
		return fs
	})
	op := operatorConn(t, c)
	amd := meshProgram(t, "amd64")
	upload(t, op, amd)
	fs.fail.Store(true)
	var res spec.ReleasePublishResult
	err := callAPI(t, op, spec.ReleasePublish.Name, spec.ReleasePublishRequest{Digest: hexDigest(amd)}, &res)
	var re *spec.ReplyError
	if !errors.As(err, &re) || re.Kind != spec.ReplyFailed || !strings.Contains(err.Error(), "disk I/O error") {
		t.Errorf("release.publish over a failing read = %v, want the controller's failure naming the read", err)
	}
	fs.fail.Store(false)
	if got := releaseList(t, op); len(got) != 0 {
		t.Errorf("release.list = %+v after a failed publish, want nothing", got)
	}
}

// TestReleaseListPages: releases are listed in the order published, and a
// list is paged from After.
func TestReleaseListPages(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, _ := newController(t, clk)
	op := operatorConn(t, c)
	var digests []string
	for _, arch := range []string{"arm64", "amd64"} {
		b := meshProgram(t, arch)
		upload(t, op, b)
		var res spec.ReleasePublishResult
		if err := callAPI(t, op, spec.ReleasePublish.Name, spec.ReleasePublishRequest{Digest: hexDigest(b)}, &res); err != nil {
			t.Fatal(err)
		}
		digests = append(digests, hexDigest(b))
		clk.Add(time.Minute)
	}
	got := releaseList(t, op)
	if len(got) != 2 || got[0].Digest != digests[0] || got[0].Target() != "linux/arm64" || got[1].Digest != digests[1] || got[1].Target() != "linux/amd64" {
		t.Fatalf("release.list = %+v, want arm64 then amd64, as published", got)
	}
	var page spec.ReleaseListResult
	if err := callAPI(t, op, spec.ReleaseList.Name, spec.ReleaseListRequest{After: 1}, &page); err != nil || len(page.Releases) != 1 || page.Releases[0].Digest != digests[1] {
		t.Errorf("release.list after 1 = %+v, %v; want the second only", page, err)
	}
}
