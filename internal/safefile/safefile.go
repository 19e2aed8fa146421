// Package safefile writes files atomically (invariant 6): to a temporary
// file beside the target, synced, renamed over it, and the directory
// synced. The host's state and the state directory's files are written
// with it.
package safefile

import (
	"os"
	"path/filepath"
)

// WriteFile writes data to a temporary file beside path, syncs it,
// renames it over path and syncs the directory: a reader sees the old file
// or the new one, and a running program keeps the inode it opened.
func WriteFile(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
