package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// dbFile is the controller's store under D/controller (mesh.DBFile).
const dbFile = "mesh.db"

// putBackFile marks the store as put back (mesh.PutBackFile): the
// controller then begins a new log of the store's writes from it, rather
// than apply the log's later entries, written by the version it fell
// back from.
const putBackFile = dbFile + ".put-back"

// A controller's store is copied before a version that is not yet good
// first runs (it may migrate the store), and put back when the launcher
// falls back from it, so the version it falls back to never faces a newer
// schema: D/controller/mesh.db.before-<digest>. The copy is the store
// alone (store.Snapshot: VACUUM INTO): the at-rest key beside it,
// D/controller/seal.key, is never copied, so a snapshot holds secret
// settings sealed and not the key that opens them (docs/secrets.md,
// TestSnapshotHoldsTheStoreOnly).

func (l *Launcher) dbPath() string { return filepath.Join(statedir.Controller(l.cfg.Dir), dbFile) }

func (l *Launcher) snapshotPath(digest string) string { return l.dbPath() + ".before-" + digest }

func (l *Launcher) putBackPath() string {
	return filepath.Join(statedir.Controller(l.cfg.Dir), putBackFile)
}

// beforeTrial snapshots the store before p runs, when p is a controller's
// version the launcher may fall back from. A trial cut short (the
// launcher killed while p came up) keeps the snapshot it took: the store
// may already be p's.
func (l *Launcher) beforeTrial(ctx context.Context, p pick) error {
	if l.cfg.Mode != Controller || p.digest == p.fallback {
		return nil
	}
	if _, err := os.Stat(l.dbPath()); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	snap := l.snapshotPath(p.digest)
	if _, err := os.Stat(snap); err == nil && l.launch.Running == p.digest {
		l.log.Info("keeping the store's snapshot of the trial cut short", "version", short(p.digest), "snapshot", snap)
		return nil
	}
	if err := store.Snapshot(ctx, l.dbPath(), snap); err != nil {
		return fmt.Errorf("before running %s: %w", short(p.digest), err)
	}
	l.log.Info("store copied before the version runs", "version", short(p.digest), "snapshot", snap)
	return nil
}

// finishRestore puts the store back as it was before the version last
// run, when that version is bad and its snapshot is there: at a fallback,
// and at start after a launcher that stopped half-way through one. The
// put-back mark is written first, and made durable with the store's
// rename: the version fallen back to must not apply the log's entries
// the bad version wrote.
func (l *Launcher) finishRestore() error {
	running := l.launch.Running
	if l.cfg.Mode != Controller || running == "" {
		return nil
	}
	if _, bad := l.launch.Bad[running]; !bad {
		return nil
	}
	snap := l.snapshotPath(running)
	if _, err := os.Stat(snap); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.WriteFile(l.putBackPath(), nil, 0o600); err != nil {
		return fmt.Errorf("falling back from %s: mark the store put back: %w", short(running), err)
	}
	if err := store.Restore(snap, l.dbPath()); err != nil {
		return fmt.Errorf("falling back from %s: %w", short(running), err)
	}
	l.log.Info("store restored as it was before the version ran", "version", short(running))
	return nil
}

// dropSnapshot removes the snapshot taken before digest ran, once it is
// good: the store has moved on.
func (l *Launcher) dropSnapshot(digest string) error {
	if l.cfg.Mode != Controller {
		return nil
	}
	if err := os.Remove(l.snapshotPath(digest)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the store's snapshot: %w", err)
	}
	return nil
}
