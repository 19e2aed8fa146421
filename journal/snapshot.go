package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/store"
)

// snapshotKeyPrefix and an id is the key of an entry naming a snapshot:
// a key of its own, so the newest is found by subject.
const snapshotKeyPrefix = "snap."

// snapshotMethod is the method of an entry naming a snapshot: the store
// as it was at the revision the entry carries, kept in the object store.
// Applied, it only records its own revision.
const snapshotMethod = "snapshot"

type snapshotArgs struct {
	Object string `json:"object"`
	// Revision is the view's applied revision the snapshot holds: a
	// view rebuilt from it applies the entries after.
	Revision uint64 `json:"revision"`
}

// beganKey is the bucket's key put as a log begins: its revision, 1 or
// more, is the revision of the log's first snapshot, so a store that
// applied revision 0 was never a view of a log.
const beganKey = "began"

// begin starts an empty log from the store as it is: the store is taken
// to have applied every message the log's stream held so far, up to the
// put of beganKey (none of them an entry; a store restored from a backup
// may have applied another log), a copy of it is put in the snapshots' object store, and an entry
// names it; begin returns the snapshot's name. A crash part way leaves the log without entries, and the
// next start begins it again.
func (j *Journal) begin(ctx context.Context) (string, error) {
	rev, err := j.put(ctx, beganKey, []byte(time.Now().UTC().Format(time.RFC3339)))
	if err != nil {
		return "", fmt.Errorf("begin the store's log: %w", err)
	}
	if err := j.db.MarkApplied(ctx, rev); err != nil {
		return "", fmt.Errorf("begin the store's log: %w", err)
	}
	name, err := j.putSnapshot(ctx, rev)
	if err != nil {
		return "", fmt.Errorf("begin the store's log: %w", err)
	}
	j.log.Info("the store's log begins with a snapshot of the store", "object", name, "revision", rev)
	return name, nil
}

// putSnapshot copies the view, which has applied revision rev and which
// nothing else writes meanwhile, into the snapshots' object store, then
// appends the entry naming it, and returns the object's name.
func (j *Journal) putSnapshot(ctx context.Context, rev uint64) (string, error) {
	if err := j.db.Sync(ctx); err != nil {
		return "", err
	}
	copyPath, err := j.copyView(ctx)
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(filepath.Dir(copyPath))
	return j.publishSnapshot(ctx, copyPath, rev)
}

// copyView writes a consistent copy of the view in a new temporary
// directory, and returns its path.
func (j *Journal) copyView(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp("", "mesh-snapshot-")
	if err != nil {
		return "", err
	}
	copyPath := filepath.Join(dir, "mesh.db")
	if err := j.db.CopyTo(ctx, copyPath); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return copyPath, nil
}

// publishSnapshot puts the copy of the view at copyPath, which holds
// revision rev, in the snapshots' object store, then appends the entry
// naming it, and returns the object's name.
func (j *Journal) publishSnapshot(ctx context.Context, copyPath string, rev uint64) (string, error) {
	f, err := os.Open(copyPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	obs, err := j.js.ObjectStore(ctx, j.cfg.snapshots())
	if err != nil {
		return "", fmt.Errorf("open the store's snapshots: %w", err)
	}
	id, err := newID()
	if err != nil {
		return "", err
	}
	name := "snapshot-" + id
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: name}, f); err != nil {
		return "", fmt.Errorf("keep the store's snapshot: %w", err)
	}
	args, _ := json.Marshal(snapshotArgs{Object: name, Revision: rev})
	if _, err := j.put(ctx, entryKeyPrefix+snapshotKeyPrefix+id, encodeEntry(snapshotMethod, args)); err != nil {
		return "", fmt.Errorf("append snapshot %s to the store's log: %w", name, err)
	}
	return name, nil
}

// snapshotEntry reads the entry naming a snapshot in msg.
func snapshotEntry(msg *jetstream.RawStreamMsg) (snapshotArgs, error) {
	var snap snapshotArgs
	e, err := readEntry(msg.Data)
	if err != nil || e.Method != snapshotMethod {
		return snap, fmt.Errorf("entry %d of the store's log names no snapshot", msg.Sequence)
	}
	if err := json.Unmarshal(e.Args, &snap); err != nil {
		return snap, fmt.Errorf("entry %d of the store's log: %w", msg.Sequence, err)
	}
	return snap, nil
}

// oldestSnapshot is the oldest snapshot the log names: every entry after
// its revision is in the log. jetstream.ErrMsgNotFound if none.
func oldestSnapshot(ctx context.Context, stream jetstream.Stream, cfg Config) (snapshotArgs, error) {
	msg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(cfg.prefix()+snapshotKeyPrefix+"*"))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return snapshotArgs{}, err
		}
		return snapshotArgs{}, fmt.Errorf("read the log's oldest snapshot: %w", err)
	}
	return snapshotEntry(msg)
}

// newestSnapshot is the newest snapshot the log names, or
// jetstream.ErrMsgNotFound.
func newestSnapshot(ctx context.Context, stream jetstream.Stream, cfg Config) (snapshotArgs, error) {
	msg, err := stream.GetLastMsgForSubject(ctx, cfg.prefix()+snapshotKeyPrefix+"*")
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return snapshotArgs{}, err
		}
		return snapshotArgs{}, fmt.Errorf("read the log's newest snapshot: %w", err)
	}
	return snapshotEntry(msg)
}

// ErrNoLog is a view to rebuild from a log that holds no entry.
var ErrNoLog = errors.New("the store's log holds no entry to rebuild the store from")

// Rebuild writes, at path, the store the log's newest snapshot holds. A
// journal run on it then applies every entry after. No store may be at
// path.
func Rebuild(ctx context.Context, js jetstream.JetStream, cfg Config, path string) error {
	stream, err := js.Stream(ctx, "KV_"+cfg.bucket())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return ErrNoLog
	}
	if err != nil {
		return fmt.Errorf("rebuild the store: read its log: %w", err)
	}
	snap, err := newestSnapshot(ctx, stream, cfg)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return ErrNoLog
	}
	if err != nil {
		return fmt.Errorf("rebuild the store: %w", err)
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
