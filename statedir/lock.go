package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Lock takes D/.lock, so that two processes never run on one state
// directory; the lock goes with the process, however it ends. The holder
// writes its process ID and its parent's there, which HolderOrphaned reads.
func Lock(dir string) (release func(), err error) {
	return lock(dir, LockFile, "another mesh process runs on %s (it holds %s): stop it first, or give another --dir", true)
}

// LockLaunch takes D/.launch.lock, so that two launchers (mesh host, mesh
// controller) never run on one state directory; the child a launcher
// runs takes D/.lock itself.
func LockLaunch(dir string) (release func(), err error) {
	return lock(dir, LaunchLockFile, "another mesh process runs on %s (its launcher holds %s): stop it first, or give another --dir", false)
}

// Free says whether D/.lock is free now: no process runs on dir. It takes
// the lock and lets it go at once.
func Free(dir string) (bool, error) {
	release, err := lock(dir, LockFile, "", false)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	release()
	return true, nil
}

// HolderOrphaned says whether the process that holds D/.lock may be on its
// way out: it lost the parent it had when it took the lock (a launcher
// killed with -9, whose child the kernel then kills too), or it is gone,
// or what it wrote cannot be read. It is false only for a holder that
// runs on under the same parent: another mesh process, there to stay.
func HolderOrphaned(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, LockFile))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return true
	}
	pid, err1 := strconv.Atoi(f[0])
	ppid, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || pid <= 0 {
		return true
	}
	now, ok := parentOf(pid)
	return !ok || now != ppid
}

// parentOf is the parent process ID of pid, from /proc/PID/stat; false
// for a process that is gone or a zombie.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

func lock(dir, name, held string, record bool) (release func(), err error) {
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
	if record {
		// Best effort: a holder that could not say who it is is taken
		// for one on its way out (HolderOrphaned), as before it said.
		if f.Truncate(0) == nil {
			f.WriteAt([]byte(fmt.Sprintf("%d %d\n", os.Getpid(), os.Getppid())), 0)
		}
	}
	return func() { f.Close() }, nil
}
