package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mesh-fleet/mesh/seal"

	"github.com/mesh-fleet/mesh/spec"
	"golang.org/x/sys/unix"
)

func init() {
	registerKind(hostKind{name: spec.KindFile, applier: func(s *Services) Applier {
		return fileApplier{root: s.Root, blobs: s.Blobs, seal: s.SealKey, docker: s.Docker, node: s.Node}
	}})
}

// fileApplier holds files under root: content, mode and (when declared)
// owner and group, written atomically.
type fileApplier struct {
	root  string
	blobs BlobFetcher
	seal  *seal.NodeKey // opens a sealed content; nil: the host keeps no key
	// docker and node reach the container a file's on_change names; nil
	// docker: such a change fails, saying the host has no engine.
	docker *Docker
	node   string
}

// reload signals or restarts the container f's on_change names, after its
// content changed, and says so; a container not there (not made yet) is
// nothing to do.
func (a fileApplier) reload(ctx context.Context, f *spec.FileSpec, w *Writes) (string, error) {
	oc := f.OnChange
	name := spec.ContainerName(a.node, oc.Container)
	if a.docker == nil {
		return "", fmt.Errorf("%s changed, and its on_change names container %s, but the host has no container engine", f.Path, name)
	}
	w.add()
	done, err := a.docker.Reload(ctx, name, oc.Signal)
	switch {
	case err != nil:
		return "", fmt.Errorf("%s is written, and %w", f.Path, err)
	case !done:
		return "", nil
	case oc.Restart:
		return "restarted container " + name, nil
	}
	return "sent " + oc.Signal + " to container " + name, nil
}

// opened is f as the machine is to hold it: a sealed content opened with
// the node's key, sized and digested as it is. A secret that came unsealed
// is refused: the controller seals every one.
func (a fileApplier) opened(f *spec.FileSpec) (*spec.FileSpec, error) {
	switch {
	case f.Sealed == "" && f.Secret:
		return nil, fmt.Errorf("%s: a secret content came unsealed; it is refused", f.Path)
	case f.Sealed == "":
		return f, nil
	case a.seal == nil:
		return nil, fmt.Errorf("%s: its content is sealed to this node, and the host keeps no sealing key (%s): remove the node and join it again", f.Path, seal.NodeKeyFile)
	}
	content, err := a.seal.Open(f.Sealed)
	if err != nil {
		return nil, fmt.Errorf("%s: open its sealed content: %w", f.Path, err)
	}
	o := *f
	o.Content, o.Sealed, o.Size, o.Digest = content, "", int64(len(content)), spec.ContentDigest(content)
	return &o, nil
}

// fileOf is r's file spec.
func fileOf(r spec.Resource) (*spec.FileSpec, error) {
	f, ok := spec.As[*spec.FileSpec](r)
	if !ok || f == nil {
		return nil, fmt.Errorf("resource %q has no file spec", r.Name)
	}
	return f, nil
}

// fileDecision is what applying a file takes, read from the machine.
type fileDecision struct {
	at       *spot // where the file lies under the engine's root; the caller closes it
	uid, gid int   // -1: not managed
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

// planFile reads what is at f's path under root, exactly, and decides what
// applying f takes. It writes nothing. On success the decision holds the
// file's spot open: the caller closes it.
func planFile(root string, f *spec.FileSpec) (fileDecision, error) {
	d := fileDecision{}
	var err error
	if d.uid, d.gid, err = ownerIDs(f.Owner, f.Group); err != nil {
		return d, err
	}
	at, st, ok, err := inspect(root, f.Path)
	if err != nil {
		return d, err
	}
	d.at = at
	fail := func(err error) (fileDecision, error) {
		d.at.close()
		d.at = nil
		return d, err
	}
	if !ok {
		d.write = true
		return d, nil
	}
	d.exists = true
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fail(fmt.Errorf("%s is at %s where a file is declared; it is left in place", what(st.Mode), d.at.path))
	}
	same, err := sameContent(d.at, &st, f)
	if err != nil {
		return fail(err)
	}
	if !same {
		d.write = true
		return d, nil
	}
	d.chown, d.chmod = metaDrift(&st, f.Mode, d.uid, d.gid)
	return d, nil
}

// sameContent says whether the regular file at s (st) holds f's content:
// sizes first, and only when they agree the SHA-256 of the content,
// streamed through one small buffer.
func sameContent(s *spot, st *unix.Stat_t, f *spec.FileSpec) (bool, error) {
	if st.Size != f.Size {
		return false, nil
	}
	fd, err := s.openRead()
	if err != nil {
		return false, fmt.Errorf("read %s: %w", s.path, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, min(max(f.Size, 1), 64<<10))
	h := sha256.New()
	var total int64
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read %s: %w", s.path, err)
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

// Plan says what Apply would do to hold r, writing nothing.
func (a fileApplier) Plan(_ context.Context, r spec.Resource) (Result, error) {
	f, err := fileOf(r)
	if err != nil {
		return Result{}, err
	}
	if f, err = a.opened(f); err != nil {
		return Result{}, err
	}
	d, err := planFile(a.root, f)
	if err != nil {
		return Result{}, err
	}
	d.at.close()
	return Result{Outcome: d.outcome()}, nil
}

// Apply makes the machine hold the file r declares. Content that is already
// right is never rewritten (a wrong mode or owner is fixed in place); content
// that is not is written atomically, fetching a blob only then.
func (a fileApplier) Apply(ctx context.Context, r spec.Resource, w *Writes) (Result, error) {
	f, err := fileOf(r)
	if err != nil {
		return Result{}, err
	}
	if f, err = a.opened(f); err != nil {
		return Result{}, err
	}
	d, err := planFile(a.root, f)
	if err != nil {
		return Result{}, err
	}
	defer d.at.close()
	if !d.write {
		if err := fixMeta(d.at, unix.S_IFREG, f.Mode, d.uid, d.gid, d.chown, d.chmod, w); err != nil {
			return Result{}, err
		}
		return Result{Outcome: d.outcome()}, nil
	}
	fill := writeAll(d.at, f.Content)
	if f.Blob {
		fill = func(out io.Writer) error { return fetchBlob(ctx, a.blobs, f.Digest, f.Size, f.Path, out) }
	}
	if err := writeFileFrom(d.at, fill, f.Mode, d.uid, d.gid, w); err != nil {
		return Result{}, err
	}
	if f.OnChange == nil {
		return Result{Outcome: d.outcome()}, nil
	}
	note, err := a.reload(ctx, f, w)
	if err != nil {
		return Result{}, err
	}
	return Result{Outcome: d.outcome(), Note: note}, nil
}

// fetchBlob fetches the blob digest of size bytes (the content of what,
// for messages) into out, chunk by chunk, hashing as it goes: an error when
// the bytes fetched are not size long or do not hash to digest, so the
// caller keeps none of them.
func fetchBlob(ctx context.Context, blobs BlobFetcher, digest string, size int64, what string, out io.Writer) error {
	if blobs == nil {
		return fmt.Errorf("fetch blob %s for %s: no blob fetcher", digest, what)
	}
	h := sha256.New()
	n := &counter{}
	if err := blobs.Fetch(ctx, digest, size, io.MultiWriter(out, h, n)); err != nil {
		return fmt.Errorf("fetch blob %s for %s: %w", digest, what, err)
	}
	if n.n != size {
		return fmt.Errorf("blob %s for %s: fetched %d bytes where %d are declared; nothing written", digest, what, n.n, size)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("blob %s for %s: the fetched content's digest is %s; nothing written", digest, what, got)
	}
	return nil
}

// counter counts the bytes written to it.
type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// writeFileExact writes data to s atomically: a temporary file in the same
// directory, written, chowned (uid or gid >= 0) and then chmodded to exactly
// mode (after the chown, which would clear setuid and setgid), synced,
// renamed over s, and the directory synced. A program that had the old file
// open keeps its inode. Every step is made relative to the directory s was
// reached in, so none of it lands outside the root. Unlike safefile.WriteFile
// it keeps setuid, setgid and sticky bits, sets the owner, and counts its
// writes.
func writeFileExact(s *spot, data []byte, mode spec.Mode, uid, gid int, w *Writes) error {
	return writeFileFrom(s, writeAll(s, data), mode, uid, gid, w)
}

// writeAll writes data, the content of the file at s.
func writeAll(s *spot, data []byte) func(io.Writer) error {
	return func(out io.Writer) error {
		if _, err := out.Write(data); err != nil {
			return fmt.Errorf("write %s: %w", s.path, err)
		}
		return nil
	}
}

// writeFileFrom is writeFileExact with the content written by fill into
// the temporary file; when fill fails (its error says what failed), the
// temporary file is removed and nothing is renamed.
func writeFileFrom(s *spot, fill func(io.Writer) error, mode spec.Mode, uid, gid int, w *Writes) error {
	// The missing parents and the temporary file are made when fill
	// writes its first byte: a fetch that fails before any arrives writes
	// nothing. One that fails later (bytes that do not hash to the digest)
	// takes away the temporary file and the parents made for it.
	base, err := unix.Dup(s.dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", s.path, err)
	}
	defer unix.Close(base)
	made := slices.Clone(s.missing)
	lf := &lazyFile{s: s, w: w}
	if err := fill(lf); err != nil {
		if lf.f != nil {
			lf.f.Close()
			w.add()
			unix.Unlinkat(s.dir, lf.tmp, 0)
		}
		for i := len(made) - len(s.missing); i > 0; i-- {
			w.add()
			unix.Unlinkat(base, filepath.Join(made[:i]...), unix.AT_REMOVEDIR)
		}
		return err
	}
	if lf.f == nil {
		if err := lf.open(); err != nil { // empty content
			return err
		}
	}
	f, tmp := lf.f, lf.tmp
	discard := func(step string, err error) error {
		f.Close()
		w.add()
		unix.Unlinkat(s.dir, tmp, 0)
		return fmt.Errorf("%s %s: %w", step, s.path, err)
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
	if err := unix.Renameat(s.dir, tmp, s.dir, s.name); err != nil {
		return discard("rename a temporary file over", err)
	}
	return s.syncDir()
}

// lazyFile is the temporary file beside s, made (with s's missing
// parents) at the first write.
type lazyFile struct {
	s   *spot
	w   *Writes
	f   *os.File
	tmp string
}

func (l *lazyFile) open() error {
	if err := l.s.makeParents(l.w); err != nil {
		return err
	}
	// A host killed between creating a temporary file and renaming it left
	// one behind: it is ours, and goes before the next is made.
	prefix := "." + l.s.name + ".mesh-"
	if names, err := l.s.siblings(); err == nil {
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				l.w.add()
				unix.Unlinkat(l.s.dir, n, 0)
			}
		}
	}
	l.w.add()
	f, tmp, err := createTemp(l.s.dir, prefix)
	if err != nil {
		return fmt.Errorf("create a temporary file for %s: %w", l.s.path, err)
	}
	l.f, l.tmp = f, tmp
	l.w.add() // the content
	return nil
}

func (l *lazyFile) Write(p []byte) (int, error) {
	if l.f == nil {
		if len(p) == 0 {
			return 0, nil
		}
		if err := l.open(); err != nil {
			return 0, err
		}
	}
	return l.f.Write(p)
}

// createTemp creates a new file named prefix and a random suffix in the
// directory dir, 0600, never through a link.
func createTemp(dir int, prefix string) (*os.File, string, error) {
	for range 100 {
		name := prefix + strconv.FormatUint(uint64(rand.Uint32()), 36)
		fd, err := openFileRetry(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return os.NewFile(uintptr(fd), name), name, nil
	}
	return nil, "", fmt.Errorf("100 names taken, beginning %s", prefix)
}

// Remove removes the file rec was. A missing file is fine, and so is
// something else standing at its path (a directory, a link): it is not the
// file, and it is left in place.
func (a fileApplier) Remove(_ context.Context, rec Applied, _ []string, w *Writes) (Result, error) {
	removed := Result{Outcome: spec.Removed}
	t, err := openTree(a.root)
	if err != nil {
		return Result{}, err
	}
	defer t.close()
	at, err := locateRecorded(t, rec)
	if err != nil || at == nil {
		return removed, err
	}
	defer at.close()
	st, ok, err := at.lstat()
	if err != nil || !ok {
		return removed, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		// Not a file, so not what rec was: this applier makes only regular
		// files at its paths. Whatever stands there is someone else's.
		return removed, nil
	}
	w.add()
	if err := unix.Unlinkat(at.dir, at.name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return Result{}, fmt.Errorf("remove file %s: %w", at.path, err)
	}
	return removed, at.syncDir()
}
