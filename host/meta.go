package host

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/mesh-fleet/mesh/spec"
	"golang.org/x/sys/unix"
)

// ownerIDs resolves a declared owner and group to ids; -1 stands for one
// that is not declared (not managed).
func ownerIDs(owner, group string) (uid, gid int, err error) {
	uid, gid = -1, -1
	if owner != "" {
		if uid, err = resolveID("owner", owner, func(name string) (string, error) {
			u, err := user.Lookup(name)
			if err != nil {
				return "", err
			}
			return u.Uid, nil
		}); err != nil {
			return -1, -1, err
		}
	}
	if group != "" {
		if gid, err = resolveID("group", group, func(name string) (string, error) {
			g, err := user.LookupGroup(name)
			if err != nil {
				return "", err
			}
			return g.Gid, nil
		}); err != nil {
			return -1, -1, err
		}
	}
	return uid, gid, nil
}

// resolveID takes a numeric string as the id itself and looks anything else
// up by name.
func resolveID(role, s string, lookup func(string) (string, error)) (int, error) {
	if id, err := strconv.ParseUint(s, 10, 32); err == nil {
		if id == 1<<32-1 {
			return -1, fmt.Errorf("%s %q is not a valid id (it means \"no change\" to chown)", role, s)
		}
		return int(id), nil
	}
	idText, err := lookup(s)
	if err != nil {
		return -1, fmt.Errorf("look up %s %q: %w", role, s, err)
	}
	id, err := strconv.ParseUint(idText, 10, 32)
	if err != nil {
		return -1, fmt.Errorf("look up %s %q: id %q is not numeric: %w", role, s, idText, err)
	}
	return int(id), nil
}

// what says what kind of thing a mode is, for messages.
func what(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return "a regular file"
	case syscall.S_IFDIR:
		return "a directory"
	case syscall.S_IFLNK:
		return "a symbolic link"
	case syscall.S_IFIFO:
		return "a named pipe"
	case syscall.S_IFSOCK:
		return "a socket"
	case syscall.S_IFCHR:
		return "a character device"
	case syscall.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("something of type %#o", mode&syscall.S_IFMT)
}

// permBits is the exact permission part of a stat mode, setuid, setgid and
// sticky included.
func permBits(st *unix.Stat_t) spec.Mode { return spec.Mode(st.Mode & 0o7777) }

// osMode is m as an os.FileMode, keeping setuid, setgid and sticky (which
// os.FileMode carries outside its permission bits).
func osMode(m spec.Mode) os.FileMode {
	fm := os.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// metaDrift says whether what st describes needs a chown or a chmod to have
// the declared mode and ids (-1: not managed).
func metaDrift(st *unix.Stat_t, mode spec.Mode, uid, gid int) (chown, chmod bool) {
	chown = (uid >= 0 && st.Uid != uint32(uid)) || (gid >= 0 && st.Gid != uint32(gid))
	return chown, permBits(st) != mode
}

// fixMeta chowns and chmods what is at s, which must be of kind (S_IFREG,
// S_IFDIR), in that order: a chown clears the setuid and setgid bits of a
// file, so the chmod comes after it whenever it runs. Both act on a
// descriptor of what is there, never through a link.
func fixMeta(s *spot, kind uint32, mode spec.Mode, uid, gid int, chown, chmod bool, w *Writes) error {
	if !chown && !chmod {
		return nil
	}
	step := "chmod"
	if chown {
		step = "chown"
	}
	fd, err := s.openMeta(kind)
	if err != nil {
		return fmt.Errorf("%s %s: %w", step, s.path, err)
	}
	defer unix.Close(fd)
	if chown {
		w.add()
		if err := chownFd(fd, uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", s.path, err)
		}
		chmod = true
	}
	if chmod {
		w.add()
		if err := chmodFd(fd, uint32(mode&0o7777)); err != nil {
			return fmt.Errorf("chmod %s: %w", s.path, err)
		}
	}
	return nil
}
