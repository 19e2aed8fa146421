package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// publishRelease records the mesh binary whose blob was uploaded as a
// release, once the controller has read its target from the stored bytes
// itself: a blob that is not a mesh binary of a known target is refused,
// naming why, and nothing is recorded. Publishing a digest again changes
// nothing and says when it was.
func (c *Controller) publishRelease(ctx context.Context, req spec.ReleasePublishRequest) (spec.ReleasePublishResult, error) {
	if err := spec.CheckReleaseDigest(req.Digest); err != nil {
		return spec.ReleasePublishResult{}, callerError(err.Error())
	}
	blob := "sha256:" + req.Digest
	size, err := c.deps.DB.BlobSize(ctx, blob)
	if errors.Is(err, store.ErrNotFound) {
		return spec.ReleasePublishResult{}, notFoundError(fmt.Sprintf("release %s: its binary was not uploaded (mesh release publish FILE uploads it)", req.Digest))
	}
	if err != nil {
		return spec.ReleasePublishResult{}, fmt.Errorf("release %s: %w", req.Digest, err)
	}
	if size > spec.MaxRelease {
		return spec.ReleasePublishResult{}, callerError(fmt.Sprintf("release %s: %d bytes, over the %d MiB a release may hold; nothing was published", req.Digest, size, spec.MaxRelease>>20))
	}
	// Read whole, once: release.Read makes some twenty reads, and each read
	// of a part of a blob has SQLite load all of it.
	data, err := c.deps.DB.Blob(ctx, blob)
	if err != nil {
		return spec.ReleasePublishResult{}, fmt.Errorf("release %s: %w", req.Digest, err)
	}
	t, err := release.Read(bytes.NewReader(data), int64(len(data)))
	if release.IsRefusal(err) {
		return spec.ReleasePublishResult{}, callerError(fmt.Sprintf("release %s: %v; nothing was published", req.Digest, err))
	}
	if err != nil {
		return spec.ReleasePublishResult{}, fmt.Errorf("release %s: %w", req.Digest, err)
	}
	r, err := c.deps.DB.PublishRelease(ctx, store.Release{Digest: req.Digest, GOOS: t.GOOS, GOARCH: t.GOARCH, Go: t.Go, Size: size, Published: c.cfg.Now()})
	if errors.Is(err, store.ErrExists) {
		return spec.ReleasePublishResult{Release: releaseOf(r), Existed: true}, nil
	}
	if err != nil {
		return spec.ReleasePublishResult{}, err
	}
	c.log.Info("release published", "digest", r.Digest, "target", t.String(), "go", t.Go, "size", size)
	return spec.ReleasePublishResult{Release: releaseOf(r)}, nil
}

func releaseOf(r store.Release) spec.Release {
	return spec.Release{Digest: r.Digest, GOOS: r.GOOS, GOARCH: r.GOARCH, Go: r.Go, Size: r.Size, Published: r.Published.UTC()}
}

// listReleases lists the releases in the order they were published, as
// many as fit one reply.
func (c *Controller) listReleases(ctx context.Context, req spec.ReleaseListRequest) (spec.ReleaseListResult, error) {
	releases, next, err := fillPage(req.After,
		func(after int64, n int) ([]store.Release, error) { return c.deps.DB.Releases(ctx, after, n) },
		func(r store.Release) int64 { return r.ID }, releaseOf)
	if err != nil {
		return spec.ReleaseListResult{}, err
	}
	return spec.ReleaseListResult{Releases: releases, Next: next}, nil
}
