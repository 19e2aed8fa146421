package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Snapshot copies the store at path, as one consistent whole, into a new
// file into (VACUUM INTO), with no migration applied: the launcher takes
// it before a version of mesh that may migrate the store first runs, so
// the version it falls back to never faces a newer schema. The copy is
// written beside into and renamed to it once complete; a file already at
// into is replaced.
func Snapshot(ctx context.Context, path, into string) error {
	tmp := into + ".partial"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot %s into %s: %w", path, tmp, err)
	}
	if err := syncFile(tmp); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	if err := os.Rename(tmp, into); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("snapshot %s: %w", path, err)
	}
	return syncDir(filepath.Dir(into))
}

// Restore puts the snapshot back as the store at path, consuming it: the
// store's write-ahead log and shared memory go first (they belong to the
// store being replaced), then the snapshot is renamed over it. No process
// may have the store open. Run again after a crash half-way, it finishes.
func Restore(snapshot, path string) error {
	if _, err := os.Stat(snapshot); err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	for _, side := range []string{path + "-wal", path + "-shm"} {
		if err := os.Remove(side); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("restore %s: %w", path, err)
		}
	}
	if err := os.Rename(snapshot, path); err != nil {
		return fmt.Errorf("restore %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
