package mesh

import (
	"context"
	"sync"
	"time"
)

// BlobGrace is how long a blob no module, declaration or release names is
// kept after it was last uploaded (or offered again): an upload comes
// before the register or publish that names it.
const BlobGrace = UploadIdle

// blobCollectEvery is how often the controller collects unused blobs
// besides after a module is removed or replaced.
const blobCollectEvery = 10 * time.Minute

// blobs are the blobs operators upload and nodes fetch: the uploads
// taken, the rights of each node to fetch, and the collection of those
// nothing names any more.
type blobs struct {
	base
	metrics *metrics
	// uploadsMu takes one blob chunk at a time: each continues its
	// upload's running hash.
	uploadsMu sync.Mutex
	// rights are the blobs each node may fetch.
	rights blobRights
	// collectKick asks collectLoop for a collection of unused blobs.
	collectKick chan struct{}
}

// collectBlobs deletes the blobs nothing names any more (store.CollectBlobs:
// no module, no node's last declaration, no release), untouched for
// BlobGrace, in one audited transaction, and counts them.
func (bs *blobs) collectBlobs(ctx context.Context) error {
	now := bs.now()
	gone, err := bs.db.CollectBlobs(ctx, now.Add(-BlobGrace), now)
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
	bs.metrics.blobsCollected.Add(uint64(len(gone)))
	bs.metrics.blobBytesCollected.Add(uint64(bytes))
	bs.log.Info("unused blobs collected", "blobs", len(gone), "bytes", bytes)
	return nil
}

// nudgeCollect asks the collector loop for a collection soon: a module
// was removed or replaced, and its blobs may be unused now.
func (bs *blobs) nudgeCollect() {
	select {
	case bs.collectKick <- struct{}{}:
	default:
	}
}

// collectLoop collects unused blobs every blobCollectEvery and when
// nudged, one collection at a time, until ctx ends.
func (bs *blobs) collectLoop(ctx context.Context) {
	tick := time.NewTicker(blobCollectEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-bs.collectKick:
		}
		bs.collectOnce(ctx)
	}
}

// collectOnce is one collection, its failure logged, its panic caught.
func (bs *blobs) collectOnce(ctx context.Context) {
	defer bs.guard.catch("blob collector", nil)
	if err := bs.collectBlobs(ctx); err != nil {
		bs.log.Error("unused blobs not collected", "err", err)
	}
}
