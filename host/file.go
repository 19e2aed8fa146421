package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/mesh-fleet/mesh/spec"
)

// fileApplier holds files: content, mode and (when declared) owner and
// group, written atomically.
type fileApplier struct{}

// fileDecision is what applying a file takes, read from the machine.
type fileDecision struct {
	path     string // under the engine's root
	uid, gid int    // -1: not managed
	exists   bool
	write    bool // the content must be (re)written
	chown    bool // the content is right but the owner or group is not
	chmod    bool // the content is right but the mode is not
}

func (d fileDecision) outcome() string {
	switch {
	case !d.exists:
		return spec.Created
	case d.write || d.chown || d.chmod:
		return spec.Changed
	}
	return spec.Unchanged
}

// planFile reads what is at f's path, exactly, and decides what applying f
// takes. It writes nothing.
func planFile(root string, f *spec.FileSpec) (fileDecision, error) {
	d := fileDecision{path: filepath.Join(root, f.Path)}
	var err error
	if d.uid, d.gid, err = ownerIDs(f.Owner, f.Group); err != nil {
		return d, err
	}
	st, ok, err := lstatExact(d.path)
	if err != nil {
		return d, err
	}
	if !ok {
		if _, err := missingParents(d.path); err != nil {
			return d, err
		}
		d.write = true
		return d, nil
	}
	d.exists = true
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return d, fmt.Errorf("%s is at %s where a file is declared; it is left in place", what(st.Mode), d.path)
	}
	same, err := sameContent(d.path, &st, f)
	if err != nil {
		return d, err
	}
	if !same {
		d.write = true
		return d, nil
	}
	d.chown, d.chmod = metaDrift(&st, f.Mode, d.uid, d.gid)
	return d, nil
}

// sameContent says whether the regular file at path (st) holds f's
// content: sizes first, and only when they agree the SHA-256 of the
// content, streamed through one small buffer.
func sameContent(path string, st *syscall.Stat_t, f *spec.FileSpec) (bool, error) {
	if st.Size != f.Size {
		return false, nil
	}
	fd, err := openNoFollow(path)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	defer syscall.Close(fd)
	buf := make([]byte, min(max(f.Size, 1), 64<<10))
	h := sha256.New()
	var total int64
	for {
		n, err := syscall.Read(fd, buf)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read %s: %w", path, err)
		}
		if n == 0 {
			break
		}
		if total += int64(n); total > f.Size {
			return false, nil // it grew since it was inspected
		}
		h.Write(buf[:n])
	}
	// A file that changed size since it was inspected is not the declared one.
	return total == f.Size && "sha256:"+hex.EncodeToString(h.Sum(nil)) == f.Digest, nil
}

// openNoFollow opens path to read, refusing a link, without the runtime's
// poller: a plain descriptor for one quick read.
func openNoFollow(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if !errors.Is(err, syscall.EINTR) {
			return fd, err
		}
	}
}

// Plan says what Apply would do to hold r, writing nothing.
func (fileApplier) Plan(root string, r spec.Resource) (string, error) {
	if r.File == nil {
		return "", fmt.Errorf("resource %q has no file spec", r.Name)
	}
	d, err := planFile(root, r.File)
	if err != nil {
		return "", err
	}
	return d.outcome(), nil
}

// Apply makes the machine hold the file r declares. Content that is already
// right is never rewritten (a wrong mode or owner is fixed in place); content
// that is not is written atomically, fetching a blob only then.
func (fileApplier) Apply(ctx context.Context, root string, r spec.Resource, blobs BlobFetcher, w *Writes) (string, error) {
	f := r.File
	if f == nil {
		return "", fmt.Errorf("resource %q has no file spec", r.Name)
	}
	d, err := planFile(root, f)
	if err != nil {
		return "", err
	}
	if !d.write {
		if err := fixMeta(d.path, f.Mode, d.uid, d.gid, d.chown, d.chmod, w); err != nil {
			return "", err
		}
		return d.outcome(), nil
	}
	data, err := fileContent(ctx, f, blobs)
	if err != nil {
		return "", err
	}
	if !d.exists {
		if err := makeParents(d.path, w); err != nil {
			return "", err
		}
	}
	if err := writeFileExact(d.path, data, f.Mode, d.uid, d.gid, w); err != nil {
		return "", err
	}
	return d.outcome(), nil
}

// fileContent is f's content: inline, or the blob fetched and verified.
func fileContent(ctx context.Context, f *spec.FileSpec, blobs BlobFetcher) ([]byte, error) {
	if !f.Blob {
		return f.Content, nil
	}
	if blobs == nil {
		return nil, fmt.Errorf("fetch blob %s for %s: no blob fetcher", f.Digest, f.Path)
	}
	data, err := blobs.Fetch(ctx, f.Digest, f.Size)
	if err != nil {
		return nil, fmt.Errorf("fetch blob %s for %s: %w", f.Digest, f.Path, err)
	}
	if int64(len(data)) != f.Size {
		return nil, fmt.Errorf("blob %s for %s: fetched %d bytes where %d are declared; nothing written", f.Digest, f.Path, len(data), f.Size)
	}
	if got := spec.ContentDigest(data); got != f.Digest {
		return nil, fmt.Errorf("blob %s for %s: the fetched content's digest is %s; nothing written", f.Digest, f.Path, got)
	}
	return data, nil
}

// writeFileExact writes data to path atomically: a temporary file in the
// same directory, written, chowned (uid or gid >= 0) and then chmodded to
// exactly mode (after the chown, which would clear setuid and setgid), synced,
// renamed over path, and the directory synced. A program that had the old
// file open keeps its inode. Unlike WriteFileAtomic it keeps setuid, setgid
// and sticky bits, sets the owner, and counts its writes.
func writeFileExact(path string, data []byte, mode spec.Mode, uid, gid int, w *Writes) error {
	dir := filepath.Dir(path)
	// A host killed between creating a temporary file and renaming it left
	// one behind: it is ours, and goes before the next is made.
	prefix := "." + filepath.Base(path) + ".mesh-"
	if stale, _ := filepath.Glob(filepath.Join(dir, globEscape(prefix)+"*")); len(stale) > 0 {
		for _, s := range stale {
			w.add()
			os.Remove(s)
		}
	}
	w.add()
	f, err := os.CreateTemp(dir, prefix+"*")
	if err != nil {
		return fmt.Errorf("create a temporary file for %s: %w", path, err)
	}
	tmp := f.Name()
	discard := func(step string, err error) error {
		f.Close()
		w.add()
		os.Remove(tmp)
		return fmt.Errorf("%s %s: %w", step, path, err)
	}
	w.add()
	if _, err := f.Write(data); err != nil {
		return discard("write", err)
	}
	if uid >= 0 || gid >= 0 {
		w.add()
		if err := f.Chown(uid, gid); err != nil {
			return discard("chown", err)
		}
	}
	w.add()
	if err := f.Chmod(osMode(mode)); err != nil {
		return discard("chmod", err)
	}
	if err := f.Sync(); err != nil {
		return discard("sync", err)
	}
	if err := f.Close(); err != nil {
		return discard("close", err)
	}
	w.add()
	if err := os.Rename(tmp, path); err != nil {
		return discard("rename a temporary file over", err)
	}
	return syncDir(dir)
}

// globEscape quotes the characters filepath.Match treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// Remove removes the file a was. A missing file is fine, and so is
// something else standing at its path (a directory, a link): it is not the
// file, and it is left in place.
func (fileApplier) Remove(root string, a Applied, w *Writes) error {
	path, err := recordedPath(root, a)
	if err != nil {
		return err
	}
	st, ok, err := lstatExact(path)
	if err != nil || !ok {
		return err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		// Not a file, so not what a was: this applier makes only regular
		// files at its paths. Whatever stands there is someone else's.
		return nil
	}
	w.add()
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("remove file %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}
