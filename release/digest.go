package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
)

// Digest is the hex SHA-256 of the executable at path, or of the running
// one when path is empty: a release's identity, the version a host reports
// (never a link-time stamp) and the name of a delivered binary's directory.
//
// A file is hashed once per process while it stays the same file: the
// digest is kept under the file's device, inode, size, modification and
// change times, so a file written or replaced since is hashed again (its
// change time moves with any write, and no caller can set it back). A
// mesh process asks for its own digest at several starts (the CLI, the
// controller, the host), and hashing the whole binary is most of a
// start's CPU.
func Digest(path string) (string, error) {
	f, path, err := openExecutable(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	id, known := identity(f)
	return digest(f, path, id, known)
}

// DigestKept is Digest, kept across processes in the file keep (a state
// directory's, statedir.ExecutableDigest): a digest kept there for the
// file as it is now (the same identity) is taken without reading the file;
// otherwise the file is hashed and keep written. A start of a mesh process
// then reads its binary (tens of MB) only after the binary changed. keep
// is a cache: a keep that cannot be read or written is the file hashed,
// as Digest does, and no error.
func DigestKept(path, keep string) (string, error) {
	f, path, err := openExecutable(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	id, known := identity(f)
	kept, _ := os.ReadFile(keep)
	if _, memo := hashed.Load(id); known && !memo {
		if d, ok := entryFor(string(kept), id); ok {
			hashed.Store(id, d)
		}
	}
	d, err := digest(f, path, id, known)
	if err != nil {
		return "", err
	}
	if entry := id.String() + " " + d; known && strings.TrimSpace(string(kept)) != entry {
		// Not an atomic write: a torn one is no entry for the file, and
		// costs one hash.
		_ = os.WriteFile(keep, []byte(entry+"\n"), 0o600)
	}
	return d, nil
}

// HandoffEnv carries the digest of an executable to the process that runs
// it (Handoff): a launcher hashes the version it runs before it runs it,
// and its child, whose version is that digest, need not read it again.
// The entry names the file by its identity as well, so it is taken only
// for that file as it was when hashed; any other file (a grandchild's, a
// file written since) is hashed as before.
const HandoffEnv = "MESH_EXEC_SHA256"

// Handoff is the HandoffEnv entry ("NAME=VALUE") for the executable at
// path: its identity and its digest, from Digest.
func Handoff(path string) (string, error) {
	f, path, err := openExecutable(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	id, known := identity(f)
	if !known {
		return "", fmt.Errorf("read the executable %s: no file identity", path)
	}
	d, err := digest(f, path, id, known)
	if err != nil {
		return "", err
	}
	return HandoffEnv + "=" + id.String() + " " + d, nil
}

// openExecutable opens the executable at path, or the running one when
// path is empty, and says which path it opened.
func openExecutable(path string) (*os.File, string, error) {
	if path == "" {
		p, err := os.Executable()
		if err != nil {
			return nil, "", fmt.Errorf("find the running executable: %w", err)
		}
		path = p
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("read the executable: %w", err)
	}
	return f, path, nil
}

// digest is the digest of f, opened from path: the one kept for its
// identity id (when known) in this process or handed over to it, or else
// hashed, and kept if the file did not change while it was read.
func digest(f *os.File, path string, id fileID, known bool) (string, error) {
	if known {
		if d, ok := hashed.Load(id); ok {
			return d.(string), nil
		}
		if d, ok := entryFor(os.Getenv(HandoffEnv), id); ok {
			hashed.Store(id, d)
			return d, nil
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read the executable %s: %w", path, err)
	}
	d := hex.EncodeToString(h.Sum(nil))
	if after, ok := identity(f); known && ok && after == id {
		hashed.Store(id, d)
	}
	return d, nil
}

// entryFor is the digest an entry "IDENTITY DIGEST" (a handoff's value, a
// keep file's line) gives the file of identity id, if it names that file.
func entryFor(entry string, id fileID) (string, bool) {
	ident, d, ok := strings.Cut(strings.TrimSpace(entry), " ")
	if !ok || ident != id.String() || len(d) != 64 {
		return "", false
	}
	if _, err := hex.DecodeString(d); err != nil {
		return "", false
	}
	return d, true
}

// hashed holds the digests Digest computed, by fileID.
var hashed sync.Map

// fileID names one version of one file's content.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime syscall.Timespec
}

func (id fileID) String() string {
	return fmt.Sprintf("%d:%d:%d:%d.%d:%d.%d", id.dev, id.ino, id.size, id.mtime.Sec, id.mtime.Nsec, id.ctime.Sec, id.ctime.Nsec)
}

func identity(f *os.File) (fileID, bool) {
	fi, err := f.Stat()
	if err != nil {
		return fileID{}, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, false
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, true
}
