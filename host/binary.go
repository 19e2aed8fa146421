package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/mesh-fleet/mesh/internal/safefile"
	"github.com/mesh-fleet/mesh/spec"
)

func init() {
	registerKind(hostKind{name: spec.KindBinary, applier: func(s *Services) Applier {
		return binaryApplier{dir: s.Versions, blobs: s.Blobs, goos: s.goos, goarch: s.goarch, verified: s.verified}
	}})
}

// binaryApplier delivers mesh binaries to the versions directory the
// launcher reads (spec/launch.go): the release's blob to
// DIR/<digest>/mesh, then its digest to DIR/want.
type binaryApplier struct {
	dir          string // D/host/versions; "" when the engine was given none
	blobs        BlobFetcher
	goos, goarch string
	verified     *verifiedBinaries
}

// verifiedBinaries remembers the binaries whose bytes were hashed and
// matched, by what stat says of them, so a reconcile pass does not hash
// the whole binary again while the file is the one it hashed.
type verifiedBinaries struct {
	mu sync.Mutex
	by map[string]binaryStat
}

// binaryStat is what stat says of a file: any write to it changes ctime.
type binaryStat struct {
	dev, ino    uint64
	size        int64
	ctimeNsec   int64
	mtimeNsec   int64
	mode        uint32
	digestMatch string
}

func statOf(fi os.FileInfo) (binaryStat, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return binaryStat{}, false
	}
	return binaryStat{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, ctimeNsec: st.Ctim.Nano(), mtimeNsec: st.Mtim.Nano(), mode: st.Mode}, true
}

func (v *verifiedBinaries) known(path, digest string, st binaryStat) bool {
	if v == nil {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	k, ok := v.by[path]
	st.digestMatch = digest
	return ok && k == st
}

func (v *verifiedBinaries) keep(path, digest string, st binaryStat) {
	if v == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.by == nil {
		v.by = map[string]binaryStat{}
	}
	st.digestMatch = digest
	v.by[path] = st
}

// binaryOf is r's binary spec.
func binaryOf(r spec.Resource) (*spec.BinarySpec, error) {
	b, ok := spec.As[*spec.BinarySpec](r)
	if !ok || b == nil {
		return nil, fmt.Errorf("resource %q has no binary spec", r.Name)
	}
	return b, nil
}

// binaryDecision is what holding a binary takes, read from the machine.
type binaryDecision struct {
	path    string // DIR/<digest>/mesh
	deliver bool   // the binary is absent or not the release's bytes
	want    bool   // want does not name the digest
	// retry is the retry file to write: the launcher marked the release
	// bad and a resumed roll asks for it again (spec.BinarySpec.Retry).
	retry *spec.Retry
}

func (d binaryDecision) outcome() string {
	switch {
	case d.deliver:
		return spec.Created
	case d.want, d.retry != nil:
		return spec.Changed
	}
	return spec.Unchanged
}

// plan refuses a binary for another system, and reads what the versions
// directory holds of b.
func (a binaryApplier) plan(b *spec.BinarySpec) (binaryDecision, error) {
	if b.GOOS != a.goos || b.GOARCH != a.goarch {
		return binaryDecision{}, fmt.Errorf("binary %s is built for %s/%s and this host runs %s/%s: it is not delivered here",
			b.Digest, b.GOOS, b.GOARCH, a.goos, a.goarch)
	}
	if a.dir == "" {
		return binaryDecision{}, errors.New("this host keeps no versions directory: a binary is delivered only to a host run with --dir")
	}
	d := binaryDecision{path: filepath.Join(a.dir, b.Digest, spec.VersionBinary)}
	ok, err := a.holds(d.path, b)
	if err != nil {
		return d, err
	}
	d.deliver = !ok
	want, err := os.ReadFile(filepath.Join(a.dir, spec.WantFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		d.want = true
	case err != nil:
		return d, fmt.Errorf("read %s: %w", spec.WantFile, err)
	default:
		d.want = string(bytes.TrimSpace(want)) != b.Digest
	}
	if b.Retry > 0 {
		l, err := readLaunchIn(a.dir)
		if err != nil {
			return d, err
		}
		r := spec.Retry{Digest: b.Digest, Count: b.Retry}
		held, ok, err := spec.ReadRetry(a.dir)
		if err != nil {
			return d, err
		}
		if l.Retries(r) && (!ok || held != r) {
			d.retry = &r
		}
	}
	return d, nil
}

// holds says whether the file at path is b's binary: a regular executable
// file of its size whose bytes hash to its digest.
func (a binaryApplier) holds(path string, b *spec.BinarySpec) (bool, error) {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() || fi.Size() != b.Size || fi.Mode().Perm() != 0o755 {
		return false, nil
	}
	st, stOK := statOf(fi)
	if stOK && a.verified.known(path, b.Digest, st) {
		return true, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, b.Size+1)); err != nil {
		return false, fmt.Errorf("read %s: %w", path, err)
	}
	if hex.EncodeToString(h.Sum(nil)) != b.Digest {
		return false, nil
	}
	if stOK {
		a.verified.keep(path, b.Digest, st)
	}
	return true, nil
}

// Plan says what Apply would do, writing nothing.
func (a binaryApplier) Plan(_ context.Context, r spec.Resource) (Result, error) {
	b, err := binaryOf(r)
	if err != nil {
		return Result{}, err
	}
	d, err := a.plan(b)
	if err != nil {
		return Result{}, err
	}
	return Result{Outcome: d.outcome()}, nil
}

// Apply delivers the binary r declares, unless its verified bytes are
// there already, writes the retry a resumed roll asks for, and then names
// it in want. Each write is atomic: a host killed at any point leaves the
// old file or the whole new one.
func (a binaryApplier) Apply(ctx context.Context, r spec.Resource, w *Writes) (Result, error) {
	b, err := binaryOf(r)
	if err != nil {
		return Result{}, err
	}
	d, err := a.plan(b)
	if err != nil {
		return Result{}, err
	}
	if d.deliver {
		if err := a.deliver(ctx, b, d.path, w); err != nil {
			return Result{}, err
		}
	}
	// The retry before want: a host that stands aside for want finds it.
	if d.retry != nil {
		w.add()
		if err := safefile.WriteFile(filepath.Join(a.dir, spec.RetryFile), d.retry.Encode(), 0o644); err != nil {
			return Result{}, fmt.Errorf("write %s: %w", filepath.Join(a.dir, spec.RetryFile), err)
		}
	}
	if d.want {
		w.add()
		if err := safefile.WriteFile(filepath.Join(a.dir, spec.WantFile), []byte(b.Digest+"\n"), 0o644); err != nil {
			return Result{}, fmt.Errorf("write %s: %w", filepath.Join(a.dir, spec.WantFile), err)
		}
	}
	return Result{Outcome: d.outcome()}, nil
}

// tempPrefix begins the name of a binary being fetched, beside where it
// goes.
const tempPrefix = "." + spec.VersionBinary + ".fetch-"

// deliver fetches b's blob into a temporary file beside path, chunk by
// chunk, hashing as it goes, and renames it into place only when its size
// and digest match; a fetch that fails leaves nothing but the digest's
// directory.
func (a binaryApplier) deliver(ctx context.Context, b *spec.BinarySpec, path string, w *Writes) error {
	dir := filepath.Dir(path)
	w.add()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	// A host killed during a fetch left its temporary file: it goes first.
	if names, err := os.ReadDir(dir); err == nil {
		for _, n := range names {
			if strings.HasPrefix(n.Name(), tempPrefix) {
				w.add()
				os.Remove(filepath.Join(dir, n.Name()))
			}
		}
	}
	w.add()
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("create a temporary file in %s: %w", dir, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return err
	}
	out := &capped{w: f, left: b.Size}
	if err := fetchBlob(ctx, a.blobs, "sha256:"+b.Digest, b.Size, "binary "+b.Digest, out); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o755); err != nil {
		return fail(fmt.Errorf("chmod %s: %w", tmp, err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("sync %s: %w", tmp, err))
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	w.add()
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename the fetched binary to %s: %w", path, err)
	}
	return syncDir(dir)
}

// capped writes to w at most left bytes: a source that sends more than
// the declared size fails at the first byte past it, before it is written.
type capped struct {
	w    io.Writer
	left int64
}

func (c *capped) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("more bytes than the %d declared", c.left)
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// syncDir fsyncs the directory at path, so an entry renamed into it
// survives a crash.
func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// Remove stops managing the binary: want is deleted, so the launcher keeps
// what it runs; no binary under the versions directory is touched (the
// running one may be among them).
func (a binaryApplier) Remove(_ context.Context, _ Applied, _ []string, w *Writes) (Result, error) {
	removed := Result{Outcome: spec.Removed}
	if a.dir == "" {
		return removed, nil
	}
	want := filepath.Join(a.dir, spec.WantFile)
	if _, err := os.Lstat(want); errors.Is(err, os.ErrNotExist) {
		return removed, nil
	}
	w.add()
	if err := os.Remove(want); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Result{}, fmt.Errorf("remove %s: %w", want, err)
	}
	return removed, syncDir(a.dir)
}

// thisSystem is the GOOS and GOARCH this host runs.
func thisSystem() (string, string) { return runtime.GOOS, runtime.GOARCH }
