package host

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"golang.org/x/sys/unix"
)

func init() {
	registerKind(hostKind{name: spec.KindCertificate, facts: true,
		record: func(s spec.Spec, a *Applied) {
			if c, ok := s.(*spec.CertificateSpec); ok {
				a.Certificate = c.Name
			}
		},
		applier: func(s *Services) Applier { return certificateApplier{root: s.Root, certs: s.certs} }})
}

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

var errNoCerts = errors.New("this host has no certificate manager (it obtains certificates only while it runs on the bus)")

// certificateApplier keeps the certificate certmagic manages for a name in
// a directory under root.
type certificateApplier struct {
	root  string
	certs *certs // nil: certificates fail, saying so
}

// certificateOf is r's certificate spec.
func certificateOf(r spec.Resource) (*spec.CertificateSpec, error) {
	c, ok := spec.As[*spec.CertificateSpec](r)
	if !ok || c == nil {
		return nil, fmt.Errorf("resource %q has no certificate spec", r.Name)
	}
	return c, nil
}

func (a certificateApplier) prepare(_ context.Context, resources []spec.Resource) {
	if a.certs != nil {
		a.certs.prepare(resources)
	}
}

func (a certificateApplier) finish() {}

// want is what a certificate's directory must hold: the pair and the root.
func (a certificateApplier) want(p pair) map[string][]byte {
	return map[string][]byte{spec.CertFile: p.chain, spec.CertKeyFile: p.key, spec.CertCAFile: []byte(a.certs.rootPM)}
}

// certDecision is what installing a pair in a directory takes, read from
// the machine.
type certDecision struct {
	at      *spot // the directory's spot; the caller closes it
	exists  bool  // the directory is there
	version string
	fresh   bool     // ..data names a version that holds exactly the pair and the root
	links   []string // the files whose link in the directory is not ..data/FILE
}

func (d certDecision) outcome() string {
	switch {
	case !d.exists:
		return spec.Created
	case !d.fresh || len(d.links) > 0:
		return spec.Changed
	}
	return spec.Unchanged
}

// planCertificate reads the directory at dir under root, exactly, and
// decides what holding want there takes. It writes nothing. On success the
// decision holds the directory's spot open: the caller closes it.
func planCertificate(root, dir string, want map[string][]byte) (certDecision, error) {
	var d certDecision
	at, st, ok, err := inspect(root, dir)
	if err != nil {
		return d, err
	}
	d.at = at
	fail := func(err error) (certDecision, error) {
		d.at.close()
		d.at = nil
		return d, err
	}
	if !ok {
		for _, f := range certFiles {
			d.links = append(d.links, f.name)
		}
		return d, nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fail(fmt.Errorf("%s is at %s where a certificate's directory is declared; it is left in place", what(st.Mode), d.at.path))
	}
	d.exists = true
	fd, err := openRetry(d.at.dir, d.at.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return fail(fmt.Errorf("open %s: %w", d.at.path, err))
	}
	defer unix.Close(fd)
	d.version, err = readVersionLink(fd)
	if err != nil {
		return fail(fmt.Errorf("read %s/%s: %w", d.at.path, spec.CertDataLink, err))
	}
	if d.version != "" {
		if d.fresh, err = versionHolds(fd, d.version, want); err != nil {
			return fail(fmt.Errorf("read %s/%s: %w", d.at.path, d.version, err))
		}
	}
	for _, f := range certFiles {
		target, err := readLinkAt(fd, f.name)
		if err != nil {
			return fail(fmt.Errorf("read %s/%s: %w", d.at.path, f.name, err))
		}
		if target != spec.CertDataLink+"/"+f.name {
			d.links = append(d.links, f.name)
		}
	}
	return d, nil
}

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

// Plan says what Apply would do, writing nothing and asking nothing of the
// controller: against the certificate certmagic keeps now, or, when it
// keeps none yet, that one would be obtained.
func (a certificateApplier) Plan(ctx context.Context, r spec.Resource) (Result, error) {
	cs, err := certificateOf(r)
	if err != nil {
		return Result{}, err
	}
	if a.certs == nil {
		return Result{}, errNoCerts
	}
	p, ok, err := a.certs.current(ctx, cs.Name)
	if err != nil {
		return Result{}, err
	}
	want := map[string][]byte{}
	if ok {
		want = a.want(p)
	}
	d, err := planCertificate(a.root, cs.Path, want)
	if err != nil {
		return Result{}, err
	}
	d.at.close()
	if !ok {
		out := spec.Changed
		if !d.exists {
			out = spec.Created
		}
		return Result{Outcome: out, Note: "a certificate for " + cs.Name + " would be obtained from the controller"}, nil
	}
	return Result{Outcome: d.outcome()}, nil
}

// Apply has certmagic manage the name (obtaining its certificate from the
// controller when it keeps none) and makes the directory hold the pair it
// keeps now: a new version written and swapped in when ..data does not
// name one that holds exactly it, the links fixed where they are not
// ..data/FILE. When all is in place nothing is written.
func (a certificateApplier) Apply(ctx context.Context, r spec.Resource, w *Writes) (Result, error) {
	cs, err := certificateOf(r)
	if err != nil {
		return Result{}, err
	}
	if a.certs == nil {
		return Result{}, errNoCerts
	}
	if err := a.certs.obtain(ctx, cs.Name); err != nil {
		return Result{}, err
	}
	p, ok, err := a.certs.current(ctx, cs.Name)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return Result{}, fmt.Errorf("certmagic keeps no certificate for %s after obtaining it", cs.Name)
	}
	want := a.want(p)
	d, err := planCertificate(a.root, cs.Path, want)
	if err != nil {
		return Result{}, err
	}
	defer d.at.close()
	out := d.outcome()
	if out == spec.Unchanged {
		return Result{Outcome: out}, nil
	}
	if !d.exists {
		if err := d.at.makeParents(w); err != nil {
			return Result{}, err
		}
		w.add()
		if err := unix.Mkdirat(d.at.dir, d.at.name, 0o700); err != nil {
			return Result{}, fmt.Errorf("create directory %s: %w", d.at.path, err)
		}
		if err := fixMeta(d.at, unix.S_IFDIR, 0o755, -1, -1, false, true, w); err != nil {
			return Result{}, err
		}
	}
	fd, err := openRetry(d.at.dir, d.at.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return Result{}, fmt.Errorf("open %s: %w", d.at.path, err)
	}
	defer unix.Close(fd)
	version := d.version
	if !d.fresh {
		if version, err = writeVersion(fd, d.at.path, p.serial, want, w); err != nil {
			return Result{}, err
		}
		if err := swapLink(fd, d.at.path, spec.CertDataLink, version, w); err != nil {
			return Result{}, err
		}
	}
	for _, f := range d.links {
		if err := swapLink(fd, d.at.path, f, spec.CertDataLink+"/"+f, w); err != nil {
			return Result{}, err
		}
	}
	if err := unix.Fsync(fd); err != nil {
		return Result{}, fmt.Errorf("sync directory %s: %w", d.at.path, err)
	}
	if !d.fresh {
		// The version served before stays for a reader that resolved
		// ..data just before the swap, when it holds another certificate
		// (a renewal); older ones go, and so does one that drifted.
		keep := []string{version}
		if d.version != "" && !strings.HasPrefix(d.version, ".."+p.serial) {
			keep = append(keep, d.version)
		}
		if err := removeVersions(fd, d.at.path, keep, w); err != nil {
			return Result{}, err
		}
	}
	if !d.exists {
		if err := d.at.syncDir(); err != nil {
			return Result{}, err
		}
	}
	note := fmt.Sprintf("certificate %s for %s, valid until %s", p.serial, cs.Name, p.leaf.NotAfter.UTC().Format(time.RFC3339))
	if d.fresh {
		note = "links restored to " + spec.CertDataLink + ": " + strings.Join(d.links, ", ")
	}
	return Result{Outcome: out, Note: note}, nil
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

// Remove takes the certificate's directory out: its links, ..data and its
// versions, then the directory itself when nothing else is in it (what
// someone else put there stays, with it; the note says so). certmagic
// stops managing the name, and forgets its certificate and key, unless
// another certificate resource still declares it.
func (a certificateApplier) Remove(ctx context.Context, rec Applied, _ []string, w *Writes) (Result, error) {
	removed := Result{Outcome: spec.Removed}
	if a.certs != nil && rec.Certificate != "" {
		if err := a.certs.forget(ctx, rec.Certificate); err != nil {
			return Result{}, err
		}
	}
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
	if err != nil || !ok || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return removed, err // not a directory: not what this kind makes, and it stays
	}
	fd, err := openRetry(at.dir, at.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return Result{}, fmt.Errorf("open %s: %w", at.path, err)
	}
	defer unix.Close(fd)
	for _, f := range append([]string{spec.CertDataLink}, spec.CertFile, spec.CertKeyFile, spec.CertCAFile) {
		var lst unix.Stat_t
		if err := unix.Fstatat(fd, f, &lst, unix.AT_SYMLINK_NOFOLLOW); err != nil || lst.Mode&unix.S_IFMT != unix.S_IFLNK {
			continue
		}
		w.add()
		if err := unix.Unlinkat(fd, f, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return Result{}, fmt.Errorf("remove %s/%s: %w", at.path, f, err)
		}
	}
	if err := removeVersions(fd, at.path, nil, w); err != nil {
		return Result{}, err
	}
	names, err := listDir(fd)
	if err != nil {
		return Result{}, fmt.Errorf("list %s: %w", at.path, err)
	}
	if len(names) > 0 {
		slices.Sort(names)
		removed.Note = fmt.Sprintf("the directory is left in place: it holds %s, which the certificate did not put there", strings.Join(names, ", "))
		return removed, nil
	}
	w.add()
	if err := unix.Unlinkat(at.dir, at.name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return Result{}, fmt.Errorf("remove directory %s: %w", at.path, err)
	}
	return removed, at.syncDir()
}

// CertificatesHeld are the certificates the certificate resources among
// resources serve under root now: what each directory's ..data names,
// read beneath the root, never through a link. A directory that serves
// none (not written yet, or unreadable) is left out.
func CertificatesHeld(root string, resources []spec.Resource) []spec.HeldCert {
	var out []spec.HeldCert
	t, err := openTree(root)
	if err != nil {
		return nil
	}
	defer t.close()
	for _, r := range resources {
		cs, ok := spec.As[*spec.CertificateSpec](r)
		if !ok || cs == nil || cs.Check() != nil {
			continue
		}
		if leaf := servedLeaf(t, cs.Path); leaf != nil {
			out = append(out, spec.HeldCert{Name: cs.Name, Path: cs.Path, Serial: ca.SerialOf(leaf), NotAfter: leaf.NotAfter.UTC()})
		}
	}
	return out
}

// servedLeaf is the leaf of the cert.pem the version ..data names in the
// directory at p under t; nil when there is none.
func servedLeaf(t *tree, p string) *x509.Certificate {
	at, err := t.locate(p)
	if err != nil {
		return nil
	}
	defer at.close()
	fd, err := openRetry(at.dir, at.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	version, err := readVersionLink(fd)
	if err != nil || version == "" {
		return nil
	}
	vfd, err := openRetry(fd, version, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
	if err != nil {
		return nil
	}
	defer unix.Close(vfd)
	chain, _, err := readSmall(vfd, spec.CertFile)
	if err != nil || chain == nil {
		return nil
	}
	block, _ := pem.Decode(chain)
	if block == nil {
		return nil
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return leaf
}
