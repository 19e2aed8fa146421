package journal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/lease"
)

// The defaults of the log's compaction (Config).
const (
	defaultCompactEntries = 10000
	defaultCompactBytes   = 64 << 20
	defaultCompactEvery   = 10 * time.Minute
)

func (c Config) compactEntries() int {
	if c.CompactEntries <= 0 {
		return defaultCompactEntries
	}
	return c.CompactEntries
}

func (c Config) compactBytes() int64 {
	if c.CompactBytes <= 0 {
		return defaultCompactBytes
	}
	return c.CompactBytes
}

func (c Config) compactEvery() time.Duration {
	if c.CompactEvery <= 0 {
		return defaultCompactEvery
	}
	return c.CompactEvery
}

// sinceSnapshot is what the applier applied since the log's last
// compaction, and when that was.
type sinceSnapshot struct {
	entries int
	bytes   int64
	last    time.Time
}

// held is what the log holds, counted as applied since the last
// compaction: a log compacted holds little else than the entries since
// its newest snapshot, and a controller restarted more often than it
// compacts still compacts.
func (j *Journal) held(ctx context.Context) (sinceSnapshot, error) {
	info, err := j.stream.Info(ctx)
	if err != nil {
		return sinceSnapshot{}, fmt.Errorf("read the log's size: %w", err)
	}
	return sinceSnapshot{entries: int(info.State.Msgs), bytes: int64(info.State.Bytes)}, nil
}

// applied counts an entry of size bytes, and says whether the log is due
// a compaction.
func (s *sinceSnapshot) applied(cfg Config, size int, now time.Time) bool {
	s.entries++
	s.bytes += int64(size)
	return (s.entries >= cfg.compactEntries() || s.bytes >= cfg.compactBytes()) &&
		now.Sub(s.last) >= cfg.compactEvery()
}

// compact bounds the log: the view, which has just applied revision
// rev, is copied here, in the applier (a copy at rev, made fast from
// the local disk); then, on its own while the applier goes on, the copy
// is put in the snapshots' object store and an entry names it, and the
// entries at or below rev, the voids of those entries, and every other
// snapshot go. The lease and any other key of the bucket stay. One
// compaction runs at a time: compact starts none while one runs. A
// crash part way is safe: until the entry is appended the older
// snapshot and every entry after it are kept; after, the newest snapshot
// and every entry after it are; a later compaction removes what is left
// over. A fenced journal compacts only while its controller leads.
func (j *Journal) compact(ctx context.Context, rev uint64) {
	if !j.compacting.CompareAndSwap(false, true) {
		return
	}
	began := time.Now()
	copyPath, err := j.copyView(ctx)
	if err != nil {
		j.compacting.Store(false)
		if ctx.Err() == nil {
			j.log.Warn("the store's log not compacted", "err", fmt.Errorf("copy the view: %w", err))
		}
		return
	}
	copied := time.Since(began)
	j.compactions.Add(1)
	go func() {
		defer j.compactions.Done()
		defer j.compacting.Store(false)
		defer os.RemoveAll(filepath.Dir(copyPath))
		name, err := j.compactTo(ctx, copyPath, rev, began)
		if err != nil {
			if ctx.Err() == nil {
				j.log.Warn("the store's log not compacted", "err", err)
			}
			return
		}
		j.log.Info("the store's log compacted", "revision", rev, "snapshot", name,
			"copied", copied.Round(time.Millisecond), "took", time.Since(began).Round(time.Millisecond))
	}()
}

// compactTo puts the copy of the view at copyPath, at revision rev,
// made at copied, in the log, and purges what it makes needless.
func (j *Journal) compactTo(ctx context.Context, copyPath string, rev uint64, copied time.Time) (string, error) {
	name, err := j.publishSnapshot(ctx, copyPath, rev)
	if err != nil {
		return "", fmt.Errorf("compact the store's log: %w", err)
	}
	// A controller deposed meanwhile leaves the purge to the leader's
	// next compaction, and the snapshots to it.
	if !j.leads() {
		return "", fmt.Errorf("compact the store's log: %w", ErrNotLeading)
	}
	if err := j.stream.Purge(ctx, jetstream.WithPurgeSubject(j.cfg.prefix()+">"), jetstream.WithPurgeSequence(rev+1)); err != nil {
		return "", fmt.Errorf("compact the store's log: purge the entries up to %d: %w", rev, err)
	}
	if err := j.purgeVoids(ctx, rev); err != nil {
		return "", fmt.Errorf("compact the store's log: %w", err)
	}
	if !j.leads() {
		return "", fmt.Errorf("compact the store's log: %w", ErrNotLeading)
	}
	if err := j.dropSnapshots(ctx, name); err != nil {
		return "", fmt.Errorf("compact the store's log: %w", err)
	}
	if err := j.dropChunks(ctx, copied); err != nil {
		return "", fmt.Errorf("compact the store's log: %w", err)
	}
	return name, nil
}

// purgeVoids removes the voids of entries at or below rev: the view's
// snapshot holds their writes as refused. The applier's own set of
// voids keeps their ids, never met again.
func (j *Journal) purgeVoids(ctx context.Context, rev uint64) error {
	ids, err := voids(ctx, j.kv)
	if err != nil {
		return err
	}
	for id := range ids {
		e, err := j.kv.Get(ctx, voidKeyPrefix+id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read the void of entry %s: %w", id, err)
		}
		if of, err := strconv.ParseUint(string(e.Value()), 10, 64); err != nil || of > rev {
			continue
		}
		if err := j.stream.Purge(ctx, jetstream.WithPurgeSubject(lease.Subject(j.cfg.bucket(), voidKeyPrefix+id))); err != nil {
			return fmt.Errorf("purge the void of entry %s: %w", id, err)
		}
	}
	return nil
}

// dropSnapshots deletes every snapshot but keep.
func (j *Journal) dropSnapshots(ctx context.Context, keep string) error {
	obs, err := j.js.ObjectStore(ctx, j.cfg.snapshots())
	if err != nil {
		return fmt.Errorf("open the store's snapshots: %w", err)
	}
	infos, err := obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return fmt.Errorf("list the store's snapshots: %w", err)
	}
	for _, info := range infos {
		if info.Name == keep || !strings.HasPrefix(info.Name, "snapshot-") {
			continue
		}
		if err := obs.Delete(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("delete snapshot %s: %w", info.Name, err)
		}
	}
	return nil
}

// restart begins a new log from the store as it is, discarding the
// log's entries and voids: for a store the launcher put back, which
// must not apply the entries the version it fell back from wrote.
func (j *Journal) restart(ctx context.Context) error {
	for _, subject := range []string{j.cfg.prefix() + ">", lease.Subject(j.cfg.bucket(), voidKeyPrefix+">")} {
		if err := j.stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			return fmt.Errorf("restart the store's log: %w", err)
		}
	}
	name, err := j.begin(ctx)
	if err != nil {
		return fmt.Errorf("restart the store's log: %w", err)
	}
	return j.dropSnapshots(ctx, name)
}
