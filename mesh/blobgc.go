package mesh

import (
	"context"
	"time"
)

// BlobGrace is how long a blob no module, declaration or release names is
// kept after it was last uploaded (or offered again): an upload comes
// before the register or publish that names it.
const BlobGrace = UploadIdle

// blobCollectEvery is how often the controller collects unused blobs
// besides after a module is removed or replaced.
const blobCollectEvery = 10 * time.Minute

// collectBlobs deletes the blobs nothing names any more (store.CollectBlobs:
// no module, no node's last declaration, no release), untouched for
// BlobGrace, in one audited transaction, and counts them.
func (c *Controller) collectBlobs(ctx context.Context) error {
	now := c.cfg.Now()
	gone, err := c.deps.DB.CollectBlobs(ctx, now.Add(-BlobGrace), now)
	if err != nil {
		return err
	}
	if len(gone) == 0 {
		return nil
	}
	var bytes int64
	for _, b := range gone {
		bytes += b.Size
	}
	c.metrics.blobsCollected.Add(uint64(len(gone)))
	c.metrics.blobBytesCollected.Add(uint64(bytes))
	c.log.Info("unused blobs collected", "blobs", len(gone), "bytes", bytes)
	return nil
}

// nudgeCollect asks the collector loop for a collection soon: a module
// was removed or replaced, and its blobs may be unused now.
func (c *Controller) nudgeCollect() {
	select {
	case c.collectKick <- struct{}{}:
	default:
	}
}

// collectLoop collects unused blobs every blobCollectEvery and when
// nudged, one collection at a time, until ctx ends.
func (c *Controller) collectLoop(ctx context.Context) {
	tick := time.NewTicker(blobCollectEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-c.collectKick:
		}
		c.collectOnce(ctx)
	}
}

// collectOnce is one collection, its failure logged, its panic caught.
func (c *Controller) collectOnce(ctx context.Context) {
	defer c.guard.catch("blob collector", nil)
	if err := c.collectBlobs(ctx); err != nil {
		c.log.Error("unused blobs not collected", "err", err)
	}
}
