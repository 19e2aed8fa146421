package host

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"golang.org/x/sys/unix"
)

func init() {
	registerKind(hostKind{name: spec.KindCertificate,
		record: func(s spec.Spec, a *Applied) {
			if c, ok := s.(*spec.CertificateSpec); ok {
				a.Certificate = c.Name
			}
		},
		applier: func(s *Services) Applier { return certificateApplier{root: s.Root, certs: s.certs} },
		facts: func(s *Services, held []spec.Resource, f *spec.Facts) {
			f.Certificates = CertificatesHeld(s.Root, held)
		}})
}

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
