package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Lock takes D/.lock, so that two processes never run on one state
// directory; the lock goes with the process, however it ends.
func Lock(dir string) (release func(), err error) {
	return lock(dir, LockFile, "another mesh process runs on %s (it holds %s): stop it first, or give another --dir")
}

// LockLaunch takes D/.launch.lock, so that two launchers (mesh host, mesh
// controller) never run on one state directory; the child a launcher
// runs takes D/.lock itself.
func LockLaunch(dir string) (release func(), err error) {
	return lock(dir, LaunchLockFile, "another mesh process runs on %s (its launcher holds %s): stop it first, or give another --dir")
}

// Free says whether D/.lock is free now: no process runs on dir. It takes
// the lock and lets it go at once.
func Free(dir string) (bool, error) {
	release, err := lock(dir, LockFile, "")
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	release()
	return true, nil
}

func lock(dir, name, held string) (release func(), err error) {
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if held == "" {
				return nil, err
			}
			return nil, fmt.Errorf(held, dir, path)
		}
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}
