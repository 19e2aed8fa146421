package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/store"
)

// An upload's chunks are not in the log: each is put, as it arrives, in
// the object store Bucket-blobs, and its entry names the object, with
// the upload's progress. The writer's own view applies the chunk from
// the bytes it holds; a view rebuilt from the log fetches each from the
// object store as it applies the entry. So the log, its compactions and
// its snapshots' triggers stay as small as the store's other writes, and
// no process holds more than a chunk of a blob.

// putChunkMethod is the method of an entry naming an upload's chunk.
const putChunkMethod = "PutUploadChunkObject"

// chunkObjectPrefix begins the name of an object holding a chunk.
const chunkObjectPrefix = "chunk-"

func (c Config) chunkKeep() time.Duration {
	if c.ChunkKeep <= 0 {
		return time.Minute
	}
	return c.ChunkKeep
}

type chunkArgs struct {
	Digest string
	Offset int64
	Length int64
	Object string
	Hash   []byte
	Whole  bool
	At     time.Time
}

func (c Config) blobs() string { return c.bucket() + "-blobs" }

// putUploadChunk puts data in the blobs' object store, then appends the
// entry naming it and waits for its apply.
func (j *Journal) putUploadChunk(ctx context.Context, digest string, offset int64, data, hash []byte, whole bool, at time.Time) error {
	select {
	case <-j.ready:
	case <-ctx.Done():
		return fmt.Errorf("write %s: the store's log is not ready: %w", putChunkMethod, ctx.Err())
	}
	id, err := newID()
	if err != nil {
		return err
	}
	name := chunkObjectPrefix + id
	obs, err := j.js.ObjectStore(ctx, j.cfg.blobs())
	if err != nil {
		return fmt.Errorf("open the store's blobs: %w", err)
	}
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name}, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("keep a chunk of blob %s at %d: %w", digest, offset, err)
	}
	j.chunksMu.Lock()
	j.chunks[name] = data
	j.chunksMu.Unlock()
	defer func() {
		j.chunksMu.Lock()
		delete(j.chunks, name)
		j.chunksMu.Unlock()
	}()
	_, err = j.write(ctx, putChunkMethod, chunkArgs{Digest: digest, Offset: offset, Length: int64(len(data)),
		Object: name, Hash: hash, Whole: whole, At: at})
	return err
}

// applyChunk applies an entry naming a chunk: its bytes are the writer's,
// in this process, or else fetched from the blobs' object store.
func (j *Journal) applyChunk(ctx context.Context, db *store.DB, raw json.RawMessage) (any, error) {
	var a chunkArgs
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("read the arguments of %s: %w", putChunkMethod, err)
	}
	j.chunksMu.Lock()
	data, ok := j.chunks[a.Object]
	j.chunksMu.Unlock()
	if !ok {
		obs, err := j.js.ObjectStore(ctx, j.cfg.blobs())
		if err != nil {
			return nil, fmt.Errorf("open the store's blobs: %w", err)
		}
		if data, err = obs.GetBytes(ctx, a.Object); err != nil {
			return nil, fmt.Errorf("fetch chunk %s of blob %s: %w", a.Object, a.Digest, err)
		}
	}
	if int64(len(data)) != a.Length {
		return nil, fmt.Errorf("chunk %s of blob %s holds %d bytes, its entry says %d", a.Object, a.Digest, len(data), a.Length)
	}
	return none{}, db.PutUploadChunk(ctx, a.Digest, a.Offset, data, a.Hash, a.Whole, a.At)
}

// dropChunks deletes the chunks' objects put before a snapshot made at
// copied, less the config's ChunkKeep: the snapshot holds their writes,
// and no entry after it names them.
func (j *Journal) dropChunks(ctx context.Context, copied time.Time) error {
	obs, err := j.js.ObjectStore(ctx, j.cfg.blobs())
	if err != nil {
		return fmt.Errorf("open the store's blobs: %w", err)
	}
	infos, err := obs.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return fmt.Errorf("list the store's blobs: %w", err)
	}
	for _, info := range infos {
		if !strings.HasPrefix(info.Name, chunkObjectPrefix) || !info.ModTime.Before(copied.Add(-j.cfg.chunkKeep())) {
			continue
		}
		if err := obs.Delete(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("delete chunk %s: %w", info.Name, err)
		}
	}
	return nil
}
