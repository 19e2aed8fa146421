package host

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
	"golang.org/x/sys/unix"
)

// A certificate's directory, as Kubernetes' AtomicWriter keeps one:
//
//	PATH/..<serial>/cert.pem, key.pem, ca.pem   a version: the pair and the root
//	PATH/..data -> ..<serial>                   the version served
//	PATH/cert.pem -> ..data/cert.pem            (and key.pem, ca.pem)
//
// A new version is written whole and synced beside the one served, then
// ..data is swapped to it by one rename: a reader that resolves ..data once
// reads one version, the pair and the root that go together. The version
// served before stays until the next swap, so a reader that resolved ..data
// just before one still reads a whole pair; older ones go.

// certFiles are the files of a version, with their modes.
var certFiles = []struct {
	name string
	mode uint32
}{{spec.CertFile, 0o644}, {spec.CertKeyFile, 0o600}, {spec.CertCAFile, 0o644}}

// maxCertFile caps what is read of a file of a version: a chain of a leaf
// and an intermediate, a key, a root are each a few KiB.
const maxCertFile = 64 << 10

// readLinkAt is the target of the link name in the directory dir; "" when
// nothing, or something that is not a link, is there.
func readLinkAt(dir int, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dir, name, buf)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EINVAL):
			return "", nil
		case err != nil:
			return "", err
		case n < len(buf):
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// readVersionLink is the version ..data names in the directory dir: a
// "..NAME" entry of the directory itself; "" when ..data is missing or
// names anything else.
func readVersionLink(dir int) (string, error) {
	target, err := readLinkAt(dir, spec.CertDataLink)
	if err != nil || !isVersion(target) {
		return "", err
	}
	return target, nil
}

// isVersion says whether name is a version directory's name: "..", then
// no slash, and not ..data itself.
func isVersion(name string) bool {
	return len(name) > 2 && strings.HasPrefix(name, "..") && name[2] != '.' && !strings.Contains(name, "/") && !strings.HasPrefix(name, spec.CertDataLink)
}

// versionHolds says whether the version directory version in dir holds
// exactly want, each a regular file of its mode.
func versionHolds(dir int, version string, want map[string][]byte) (bool, error) {
	vfd, err := openRetry(dir, version, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(vfd)
	for _, f := range certFiles {
		got, mode, err := readSmall(vfd, f.name)
		if err != nil || got == nil || mode != f.mode || !bytes.Equal(got, want[f.name]) {
			return false, err
		}
	}
	return true, nil
}

// readSmall reads the regular file name in dir (never through a link) and
// its permission bits; nil when it is missing, not a regular file, or over
// maxCertFile.
func readSmall(dir int, name string) ([]byte, uint32, error) {
	fd, err := openRetry(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxCertFile {
		return nil, 0, nil
	}
	buf := make([]byte, 0, st.Size+1)
	for len(buf) < cap(buf) {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			break
		}
	}
	return buf, st.Mode & 0o7777, nil
}

// writeVersion writes want as a new version directory in dir (the
// directory at path): "..SERIAL", or with a suffix when that name is taken
// (a version that drifted). Each file is written, set to its mode and
// synced, then the version directory is synced. It returns the version's
// name.
func writeVersion(dir int, path, serial string, want map[string][]byte, w *Writes) (string, error) {
	name := ".." + serial
	for i := 0; ; i++ {
		w.add()
		err := unix.Mkdirat(dir, name, 0o700)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) || i == 100 {
			return "", fmt.Errorf("create version %s/%s: %w", path, name, err)
		}
		name = ".." + serial + "-" + strconv.FormatUint(uint64(rand.Uint32()), 36)
	}
	vfd, err := openRetry(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("open version %s/%s: %w", path, name, err)
	}
	defer unix.Close(vfd)
	for _, f := range certFiles {
		at := path + "/" + name + "/" + f.name
		w.add()
		fd, err := openFileRetry(vfd, f.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return "", fmt.Errorf("create %s: %w", at, err)
		}
		file := os.NewFile(uintptr(fd), at)
		_, err = file.Write(want[f.name])
		if err == nil {
			err = unix.Fchmod(fd, f.mode)
		}
		if err == nil {
			err = file.Sync()
		}
		if cerr := file.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", fmt.Errorf("write %s: %w", at, err)
		}
	}
	w.add()
	if err := unix.Fchmod(vfd, 0o755); err != nil {
		return "", fmt.Errorf("chmod version %s/%s: %w", path, name, err)
	}
	if err := unix.Fsync(vfd); err != nil {
		return "", fmt.Errorf("sync version %s/%s: %w", path, name, err)
	}
	return name, nil
}

// swapLink makes name in dir (the directory at path) a link to target: a
// new link beside it, renamed over it. Something that is a directory at
// name is not replaced: the error says so.
func swapLink(dir int, path, name, target string, w *Writes) error {
	tmp := "." + name + ".mesh-" + strconv.FormatUint(uint64(rand.Uint32()), 36)
	w.add()
	if err := unix.Symlinkat(target, dir, tmp); err != nil {
		return fmt.Errorf("link %s/%s to %s: %w", path, name, target, err)
	}
	w.add()
	if err := unix.Renameat(dir, tmp, dir, name); err != nil {
		unix.Unlinkat(dir, tmp, 0)
		return fmt.Errorf("link %s/%s to %s: %w (what stands there is left in place)", path, name, target, err)
	}
	return nil
}

// removeVersions removes every version directory in dir (the directory at
// path) but keep, and any link a pass cut short left behind; nothing is
// followed.
func removeVersions(dir int, path string, keep []string, w *Writes) error {
	names, err := listDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", path, err)
	}
	var stale []string
	for _, n := range names {
		switch {
		case isVersion(n) && !slices.Contains(keep, n):
			stale = append(stale, n)
		case strings.HasPrefix(n, ".") && strings.Contains(n, ".mesh-"):
			stale = append(stale, n)
		}
	}
	if len(stale) == 0 {
		return nil
	}
	under, err := os.OpenRoot(procFd(dir))
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer under.Close()
	for _, n := range stale {
		w.add()
		if err := under.RemoveAll(n); err != nil {
			return fmt.Errorf("remove %s/%s: %w", path, n, err)
		}
	}
	return nil
}

// listDir lists the directory open at fd, from a descriptor of its own
// (a duplicate would share fd's offset, and list nothing the second time).
func listDir(fd int) ([]string, error) {
	d, err := openRetry(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return readNames(d)
}
