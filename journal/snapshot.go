package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/store"
)

// begin starts an empty log: the view's applied revision is reset (a
// store restored from a backup may have applied another log), a copy of
// the store is put in the snapshots' object store, and the log's first
// entry names it. The view then applies that entry as any other, and a
// view rebuilt from the copy does alike. A crash part way leaves the log
// empty, and the next start begins it again.
func (j *Journal) begin(ctx context.Context, js jetstream.JetStream) error {
	if err := j.db.MarkApplied(ctx, 0); err != nil {
		return fmt.Errorf("begin the store's log: %w", err)
	}
	if err := j.db.Sync(ctx); err != nil {
		return fmt.Errorf("begin the store's log: %w", err)
	}
	dir, err := os.MkdirTemp("", "mesh-snapshot-")
	if err != nil {
		return fmt.Errorf("begin the store's log: %w", err)
	}
	defer os.RemoveAll(dir)
	copyPath := filepath.Join(dir, "mesh.db")
	if err := j.db.CopyTo(ctx, copyPath); err != nil {
		return fmt.Errorf("begin the store's log: %w", err)
	}
	f, err := os.Open(copyPath)
	if err != nil {
		return fmt.Errorf("begin the store's log: %w", err)
	}
	defer f.Close()
	obs, err := js.ObjectStore(ctx, j.cfg.snapshots())
	if err != nil {
		return fmt.Errorf("begin the store's log: %w", err)
	}
	id, err := newID()
	if err != nil {
		return fmt.Errorf("begin the store's log: %w", err)
	}
	name := "snapshot-" + id
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name}, f); err != nil {
		return fmt.Errorf("begin the store's log: keep the store's snapshot: %w", err)
	}
	args, _ := json.Marshal(snapshotArgs{Object: name})
	data, _ := json.Marshal(entry{Method: snapshotMethod, Args: args})
	if _, err := j.kv.Put(ctx, entryKeyPrefix+id, data); err != nil {
		return fmt.Errorf("begin the store's log: %w", err)
	}
	j.log.Info("the store's log begins with a snapshot of the store", "object", name)
	return nil
}

// ErrNoLog is a view to rebuild from a log that holds no entry.
var ErrNoLog = errors.New("the store's log holds no entry to rebuild the store from")

// Rebuild writes, at path, the store the log's first entry names: the
// snapshot the log began with. A journal run on it then applies every
// entry after. No store may be at path.
func Rebuild(ctx context.Context, js jetstream.JetStream, cfg Config, path string) error {
	stream, err := js.Stream(ctx, "KV_"+cfg.bucket())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return ErrNoLog
	}
	if err != nil {
		return fmt.Errorf("rebuild the store: read its log: %w", err)
	}
	first, err := firstEntry(ctx, stream, cfg)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return ErrNoLog
	}
	if err != nil {
		return fmt.Errorf("rebuild the store: %w", err)
	}
	var e entry
	var snap snapshotArgs
	if err := json.Unmarshal(first.Data, &e); err != nil || e.Method != snapshotMethod {
		return fmt.Errorf("rebuild the store: the log's first entry (revision %d) names no snapshot", first.Sequence)
	}
	if err := json.Unmarshal(e.Args, &snap); err != nil {
		return fmt.Errorf("rebuild the store: the log's first entry: %w", err)
	}
	obs, err := js.ObjectStore(ctx, cfg.snapshots())
	if err != nil {
		return fmt.Errorf("rebuild the store: %w", err)
	}
	partial := path + ".rebuilding"
	if err := obs.GetFile(ctx, snap.Object, partial); err != nil {
		os.Remove(partial)
		return fmt.Errorf("rebuild the store: fetch snapshot %s: %w", snap.Object, err)
	}
	if err := store.Restore(partial, path); err != nil {
		return fmt.Errorf("rebuild the store: %w", err)
	}
	return nil
}
