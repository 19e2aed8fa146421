package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
	"golang.org/x/sys/unix"
)

// The host reaches every path it creates, writes, chmods, chowns, renames or
// removes from a descriptor of its root, one component at a time: links
// among a path's parents are followed only while they stay under the root
// (read as the machine reads them: an absolute link from the machine's own
// "/", so /var/run -> /run serves when the root is "/"), and the last
// component is never followed. Every call that changes something is made
// relative to a directory reached that way (mkdirat, openat, renameat,
// unlinkat) or on a descriptor of the very thing inspected (fchown, fchmod),
// so a link swapped in under the host's feet leads nowhere outside. Go's
// os.Root is not enough here: it refuses every absolute link, and the
// machine is full of them (/var/run -> /run).

// maxLinks is how many links one path may go through, as the kernel's
// limit (40) for one lookup.
const maxLinks = 40

// escapeError is a path that lies through a link leading out of the root.
type escapeError struct {
	path, link, target, root string
}

func (e *escapeError) Error() string {
	return fmt.Sprintf("%s lies through the link %s -> %s, which leads outside the root %s; nothing there is touched", e.path, e.link, e.target, e.root)
}

// unreachableError is a path that nothing can be at: under something that
// is not a directory (errors.Is ENOTDIR), or through a link to what is
// missing (ENOENT).
type unreachableError struct {
	msg   string
	errno unix.Errno
}

func (e *unreachableError) Error() string { return e.msg }

func (e *unreachableError) Unwrap() error { return e.errno }

// tree is the engine's root, open.
type tree struct {
	root  string   // as given, for messages
	abs   string   // as given, made absolute
	heads []string // absolute prefixes that name the root: abs, and with its links resolved; made when first needed
	fd    int      // an O_PATH descriptor of the root directory
}

// openTree opens root, a directory (the links in its own path are followed:
// the root is what the host was told, not something a declaration reaches).
func openTree(root string) (*tree, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("open the root %s: %w", root, err)
	}
	fd, err := openRetry(unix.AT_FDCWD, abs, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("open the root %s: %w", root, err)
	}
	return &tree{root: root, abs: abs, fd: fd}, nil
}

func (t *tree) close() { unix.Close(t.fd) }

// inside is where an absolute link's target lies under the root (a
// relative path; "" for the root itself), and whether it does.
func (t *tree) inside(target string) (string, bool) {
	if t.heads == nil {
		t.heads = []string{t.abs}
		if real, err := fdPath(t.fd); err == nil && real != t.abs {
			t.heads = append(t.heads, real)
		}
	}
	target = filepath.Clean(target)
	for _, h := range t.heads {
		switch {
		case h == "/":
			return strings.TrimPrefix(target, "/"), true
		case target == h:
			return "", true
		case strings.HasPrefix(target, h+"/"):
			return target[len(h)+1:], true
		}
	}
	return "", false
}

// spot is where a declared path lies: the directory that holds it, reached
// beneath the root, and its last component. When directories on the way are
// missing, dir is the deepest one there is and missing names the rest, in
// order.
type spot struct {
	path    string // the root joined with the declared path, for messages
	name    string
	dir     int
	dirPath string // where dir is, as reached (links followed), for messages
	missing []string
}

// locate finds where p (absolute and clean, as spec.CheckPath has it) lies
// under t. A link on the way out of the root is an *escapeError naming it;
// a parent that is not a directory, or that a link names and is missing, is
// an *unreachableError naming it. A missing parent of the declared path's
// own is no error: the spot names it among the missing. The spot's
// directory is the caller's to release (spot.close).
func (t *tree) locate(p string) (*spot, error) {
	full := filepath.Join(t.root, p)
	comps := strings.Split(strings.TrimPrefix(p, "/"), "/")
	s := &spot{path: full, name: comps[len(comps)-1]}
	ahead := comps[:len(comps)-1]

	// Most paths go through no link, or only through relative ones that
	// stay beneath: the kernel resolves those in one call, and anything
	// else (a missing parent, an absolute link, a kernel without openat2)
	// is walked, one component at a time.
	if fd, ok := t.openBeneath(ahead); ok {
		s.dir, s.dirPath = fd, filepath.Dir(full)
		return s, nil
	}
	return t.walk(s, ahead)
}

// openBeneath opens the directory the components ahead name under the
// root, as the kernel resolves them beneath it in one call; false when it
// does not.
func (t *tree) openBeneath(ahead []string) (int, bool) {
	parent := strings.Join(ahead, "/")
	if parent == "" {
		parent = "."
	}
	for {
		fd, err := unix.Openat2(t.fd, parent, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
		})
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return fd, err == nil
	}
}

// walker is tree.walk's way along a path's parents.
type walker struct {
	t    *tree
	full string // the root joined with the declared path, for messages
	// dirs are the directories reached so far, the root first; names[i]
	// is the component that reached dirs[i] (for messages).
	dirs  []int
	names []string
	links int          // the links followed
	via   *escapeError // the last link followed, for a ".." out of the root
}

// release closes the directories reached after the first keep.
func (w *walker) release(keep int) {
	for _, d := range w.dirs[keep:] {
		unix.Close(d)
	}
	w.dirs, w.names = w.dirs[:keep], w.names[:keep]
}

// fail releases every directory and returns err, made before.
func (w *walker) fail(err error) (*spot, error) {
	w.release(0)
	return nil, err
}

// here is where c is in the last directory reached, for messages.
func (w *walker) here(c string) string {
	return filepath.Join(slices.Concat([]string{w.t.root}, w.names[1:], []string{c})...)
}

// walk finds the directory of s, whose parents are ahead, one component
// at a time from the root.
func (t *tree) walk(s *spot, ahead []string) (*spot, error) {
	root, err := dupRetry(t.fd)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", s.path, err)
	}
	w := &walker{t: t, full: s.path, dirs: []int{root}, names: []string{""}}
	declared := len(ahead) // how many at ahead's end are the declared path's own
	for len(ahead) > 0 {
		c := ahead[0]
		own := len(ahead) == declared // not from a link's target
		if own {
			declared--
		}
		ahead = ahead[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(w.dirs) == 1 {
				if t.abs == "/" {
					continue // "/.." is "/", as the machine reads it
				}
				if w.via == nil { // not from a declared path: spec.CheckPath refuses ".."
					return w.fail(fmt.Errorf("%s leads outside the root %s", w.full, t.root))
				}
				return w.fail(w.via)
			}
			w.release(len(w.dirs) - 1)
			continue
		}
		fd, err := openRetry(w.dirs[len(w.dirs)-1], c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		if errors.Is(err, unix.ENOENT) {
			if !own {
				// A link to what is missing: a disk not mounted, say.
				// Nothing is made where it points.
				return w.fail(&unreachableError{errno: unix.ENOENT, msg: fmt.Sprintf(
					"parent %s of %s is missing, reached through the link %s -> %s; nothing is created through a link that leads nowhere",
					w.here(c), w.full, w.via.link, w.via.target)})
			}
			rest := []string{c}
			rest = append(rest, ahead...) // the declared path's own: no "..", no "."
			s.dir, s.dirPath, s.missing = keepTop(w.dirs), w.here(""), rest
			return s, nil
		}
		if err != nil {
			return w.fail(fmt.Errorf("inspect %s: %w", w.here(c), err))
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return w.fail(fmt.Errorf("inspect %s: %w", w.here(c), err))
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			w.dirs, w.names = append(w.dirs, fd), append(w.names, c)
			continue
		case unix.S_IFLNK:
		default:
			unix.Close(fd)
			return w.fail(&unreachableError{errno: unix.ENOTDIR, msg: fmt.Sprintf("parent %s of %s is %s, not a directory", w.here(c), w.full, what(st.Mode))})
		}
		next, err := w.follow(fd, c)
		if err != nil {
			return w.fail(err)
		}
		ahead = append(next, ahead...)
	}
	s.dir, s.dirPath = keepTop(w.dirs), w.here("")
	return s, nil
}

// follow reads the link fd (c in the last directory reached), which it
// closes, and says what the walk goes through next: the link's target,
// from the root again when it is absolute.
func (w *walker) follow(fd int, c string) ([]string, error) {
	target, err := readlinkFd(fd)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", w.here(c), err)
	}
	if w.links++; w.links > maxLinks {
		return nil, fmt.Errorf("inspect %s: more than %d links on the way (%s -> %s)", w.full, maxLinks, w.here(c), target)
	}
	w.via = &escapeError{path: w.full, link: w.here(c), target: target, root: w.t.root}
	next := strings.Split(target, "/")
	if filepath.IsAbs(target) {
		rel, ok := w.t.inside(target)
		if !ok {
			return nil, w.via
		}
		w.release(1) // from the root again
		next = strings.Split(rel, "/")
	}
	return next, nil
}

// keepTop closes every directory of dirs but the last, and returns it.
func keepTop(dirs []int) int {
	for _, d := range dirs[:len(dirs)-1] {
		unix.Close(d)
	}
	return dirs[len(dirs)-1]
}

// close releases the spot's directory.
func (s *spot) close() {
	if s != nil {
		unix.Close(s.dir)
	}
}

// lstat reads what is at the spot without following a link; ok=false when
// nothing is.
func (s *spot) lstat() (st unix.Stat_t, ok bool, err error) {
	if len(s.missing) > 0 {
		return st, false, nil
	}
	for {
		err = unix.Fstatat(s.dir, s.name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err == nil:
		return st, true, nil
	case errors.Is(err, unix.ENOENT):
		return st, false, nil
	}
	return st, false, fmt.Errorf("inspect %s: %w", s.path, err)
}

// openRead opens what is at the spot to read it, refusing a link and never
// waiting on a pipe.
func (s *spot) openRead() (int, error) {
	return openRetry(s.dir, s.name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC)
}

// makeParents creates the directories missing on the way to the spot, 0755
// each (exactly, not as the umask leaves it). They are not recorded:
// nothing declared them.
func (s *spot) makeParents(w *Writes) error {
	for len(s.missing) > 0 {
		c, at := s.missing[0], filepath.Join(s.dirPath, s.missing[0])
		w.add()
		if err := unix.Mkdirat(s.dir, c, 0o755); err != nil {
			return fmt.Errorf("create parent directory %s: %w", at, err)
		}
		fd, err := openRetry(s.dir, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC)
		if err != nil {
			return fmt.Errorf("create parent directory %s: %w", at, err)
		}
		unix.Close(s.dir)
		s.dir, s.dirPath, s.missing = fd, at, s.missing[1:]
		w.add()
		if err := chmodFd(fd, 0o755); err != nil {
			return fmt.Errorf("chmod parent directory %s: %w", at, err)
		}
	}
	return nil
}

// openMeta opens what is at the spot to change its owner or mode, as long
// as it is of kind (S_IFREG, S_IFDIR): a link swapped in is refused, not
// followed.
func (s *spot) openMeta(kind uint32) (int, error) {
	fd, err := openRetry(s.dir, s.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Mode&unix.S_IFMT != kind {
		unix.Close(fd)
		return -1, fmt.Errorf("%s stands there now", what(st.Mode))
	}
	return fd, nil
}

// syncDir fsyncs the spot's directory, so that an entry made or removed in
// it lasts.
func (s *spot) syncDir() error {
	fd, err := openRetry(s.dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", s.dirPath, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync directory %s: %w", s.dirPath, err)
	}
	return nil
}

// names lists the directory at the spot (opened without following a link).
func (s *spot) names() ([]string, error) {
	fd, err := openRetry(s.dir, s.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return readNames(fd)
}

// siblings lists the spot's directory.
func (s *spot) siblings() ([]string, error) {
	fd, err := openRetry(s.dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return readNames(fd)
}

// readNames lists the directory open at fd, and closes it.
func readNames(fd int) ([]string, error) {
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// chownFd sets the owner and group (-1: left as they are) of what fd (an
// O_PATH descriptor) is.
func chownFd(fd, uid, gid int) error {
	for {
		err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// chmodFd sets the mode of what fd (an O_PATH descriptor) is, setuid,
// setgid and sticky included: fchmodat2 on the descriptor, or, on a kernel
// before 6.6, through its /proc/self/fd entry, which reaches the same inode
// whatever has been renamed or linked since.
func chmodFd(fd int, mode uint32) error {
	err := unix.Fchmodat(fd, "", mode, unix.AT_EMPTY_PATH)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL) {
		err = unix.Chmod(procFd(fd), mode)
	}
	return err
}

// fdPath is the path of what fd is, as the machine sees it now.
func fdPath(fd int) (string, error) {
	return os.Readlink(procFd(fd))
}

// procFd is fd's entry in /proc/self/fd: opened, it is what fd is.
func procFd(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// readlinkFd reads the link fd (an O_PATH|O_NOFOLLOW descriptor) is.
func readlinkFd(fd int) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(fd, "", buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, 2*len(buf))
	}
}

// openRetry is openat, again after an interruption.
func openRetry(dir int, name string, flags int) (int, error) {
	return openFileRetry(dir, name, flags, 0)
}

// openFileRetry is openat with a mode for what it creates, again after an
// interruption.
func openFileRetry(dir int, name string, flags int, perm uint32) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, flags, perm)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// dupRetry duplicates fd, close-on-exec.
func dupRetry(fd int) (int, error) {
	for {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if !errors.Is(err, unix.EINTR) {
			return d, err
		}
	}
}

// inspect locates p beneath root and reads what is there, a link not
// followed: its spot (open on success: the caller closes it), its stat, and
// whether anything is there at all.
func inspect(root, p string) (*spot, unix.Stat_t, bool, error) {
	t, err := openTree(root)
	if err != nil {
		return nil, unix.Stat_t{}, false, err
	}
	defer t.close()
	s, err := t.locate(p)
	if err != nil {
		return nil, unix.Stat_t{}, false, err
	}
	st, ok, err := s.lstat()
	if err != nil {
		s.close()
		return nil, unix.Stat_t{}, false, err
	}
	return s, st, ok, nil
}

// checkMountSource refuses a container mount source under root that lies
// through a link leading out of the root, or is a link itself: the engine
// follows links when it binds a source, so a container could otherwise be
// given a directory outside the root.
func checkMountSource(root, source string) error {
	t, err := openTree(root)
	if err != nil {
		return err
	}
	defer t.close()
	s, err := t.locate(source)
	if err != nil {
		return fmt.Errorf("mount source %s: %w", source, err)
	}
	defer s.close()
	st, ok, err := s.lstat()
	if err != nil {
		return fmt.Errorf("mount source %s: %w", source, err)
	}
	if ok && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fmt.Errorf("mount source %s is a symbolic link (%s), which the engine would follow: declare the directory it names instead", source, s.path)
	}
	return nil
}

// locateRecorded is where a record's path lies under t, refusing a path
// that a well-formed resource could not have had. Nil with no error: nothing
// can be there (a parent is not a directory, or a link to what is missing).
func locateRecorded(t *tree, a Applied) (*spot, error) {
	if err := spec.CheckPath(a.Path); err != nil {
		return nil, fmt.Errorf("remove %s: %w", a.Name, err)
	}
	s, err := t.locate(a.Path)
	var gone *unreachableError
	if errors.As(err, &gone) {
		return nil, nil
	}
	return s, err
}
