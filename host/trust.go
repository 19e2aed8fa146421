package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
	"golang.org/x/sys/unix"
)

func init() {
	registerKind(hostKind{name: spec.KindTrust,
		applier: func(s *Services) Applier {
			return trustApplier{root: s.Root, caRoot: s.CARoot, refresh: runRefresh}
		},
		facts: func(s *Services, _ []spec.Resource, f *spec.Facts) {
			f.TrustInstalled = TrustInstalled(s.Root, s.CARoot)
		}})
}

// trustStore is one distribution's trust store: the directory its anchors
// go in, and the command that rebuilds the store from them.
type trustStore struct {
	distro  string
	dir     string
	command []string // its name first, then its arguments
}

// trustStores are the stores the host knows, in the order it looks for them.
var trustStores = []trustStore{
	{"Debian/Ubuntu", "/usr/local/share/ca-certificates", []string{"update-ca-certificates"}},
	{"Fedora/RHEL", "/etc/pki/ca-trust/source/anchors", []string{"update-ca-trust", "extract"}},
	{"Arch", "/etc/ca-certificates/trust-source/anchors", []string{"trust", "extract-compat"}},
}

// commandDirs are where a store's refresh command is looked for, under the
// root.
var commandDirs = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

// refresher runs a store's refresh command, argv[0] its path as the
// machine under root reads it. A note says what there is to know (that
// it did not run, and why); an error, that it failed.
type refresher func(ctx context.Context, root string, argv []string) (note string, err error)

// runRefresh runs argv when the root is the machine's own "/". Under any
// other root (a test's, an image being prepared) the command would rebuild
// the machine's store, not the root's: it is not run, and the note says so.
func runRefresh(ctx context.Context, root string, argv []string) (string, error) {
	if path.Clean(root) != "/" {
		return fmt.Sprintf("the trust store was not refreshed: the root is %s, not /, so %s was not run (run it inside that root)", root, strings.Join(argv, " ")), nil
	}
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("refresh the trust store: %s: %w: %s", strings.Join(argv, " "), err, spec.Clip(strings.TrimSpace(string(out)), 512))
	}
	return "", nil
}

// trustApplier installs the mesh's root (the one the host pinned at join)
// as an anchor in the machine's trust store under root, and removes it.
type trustApplier struct {
	root    string
	caRoot  string // PEM; "" when the host holds none
	refresh refresher
}

// trustOf is r's trust spec.
func trustOf(r spec.Resource) (*spec.TrustSpec, error) {
	t, ok := spec.As[*spec.TrustSpec](r)
	if !ok || t == nil {
		return nil, fmt.Errorf("resource %q has no trust spec", r.Name)
	}
	return t, nil
}

// detectStore finds the trust store under root: the first whose anchor
// directory is a directory and whose refresh command is there. The argv is
// the command with its path found.
func detectStore(root string) (trustStore, []string, error) {
	t, err := openTree(root)
	if err != nil {
		return trustStore{}, nil, err
	}
	defer t.close()
	var looked []string
	for _, s := range trustStores {
		dir, err := isKind(t, s.dir, unix.S_IFDIR)
		if err != nil {
			return trustStore{}, nil, err
		}
		found := ""
		for _, d := range commandDirs {
			p := d + "/" + s.command[0]
			ok, err := isKind(t, p, unix.S_IFREG, unix.S_IFLNK)
			if err != nil {
				return trustStore{}, nil, err
			}
			if ok {
				found = p
				break
			}
		}
		if dir && found != "" {
			return s, append([]string{found}, s.command[1:]...), nil
		}
		looked = append(looked, fmt.Sprintf("%s with %s (%s)", s.dir, s.command[0], s.distro))
	}
	return trustStore{}, nil, fmt.Errorf("no trust store under %s: looked for %s; the mesh root is not installed", root, strings.Join(looked, ", "))
}

// isKind says whether what is at p under t (not followed if a link) is of
// one of kinds; a path nothing can be at is not.
func isKind(t *tree, p string, kinds ...uint32) (bool, error) {
	at, err := t.locate(p)
	var gone *unreachableError
	var out *escapeError
	if errors.As(err, &gone) || errors.As(err, &out) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer at.close()
	st, ok, err := at.lstat()
	if err != nil || !ok {
		return false, err
	}
	for _, k := range kinds {
		if st.Mode&unix.S_IFMT == k {
			return true, nil
		}
	}
	return false, nil
}

// anchorDecision is what installing the anchor takes.
type anchorDecision struct {
	at     *spot // the anchor's spot; the caller closes it
	argv   []string
	exists bool
	write  bool
}

func (d anchorDecision) outcome() string {
	switch {
	case !d.exists:
		return spec.Created
	case d.write:
		return spec.Changed
	}
	return spec.Unchanged
}

// planAnchor finds the store and reads the anchor named name in it.
func (a trustApplier) planAnchor(name string) (anchorDecision, error) {
	var d anchorDecision
	if a.caRoot == "" {
		return d, errors.New("this host holds no mesh root (it pinned none at join), so there is none to install")
	}
	store, argv, err := detectStore(a.root)
	if err != nil {
		return d, err
	}
	d.argv = argv
	t, err := openTree(a.root)
	if err != nil {
		return d, err
	}
	defer t.close()
	if d.at, err = t.locate(store.dir + "/" + spec.TrustAnchorFile(name)); err != nil {
		return d, err
	}
	st, ok, err := d.at.lstat()
	if err == nil && ok && st.Mode&unix.S_IFMT != unix.S_IFREG {
		err = fmt.Errorf("%s is at %s where the trust anchor goes; it is left in place", what(st.Mode), d.at.path)
	}
	if err != nil {
		d.at.close()
		return d, err
	}
	d.exists = ok
	d.write = !ok
	if ok {
		same, err := holds(d.at, a.caRoot)
		if err != nil {
			d.at.close()
			return d, err
		}
		d.write = !same
	}
	return d, nil
}

// holds says whether the regular file at s holds exactly want.
func holds(s *spot, want string) (bool, error) {
	fd, err := s.openRead()
	if err != nil {
		return false, fmt.Errorf("read %s: %w", s.path, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, len(want)+1)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("read %s: %w", s.path, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n == len(want) && bytes.Equal(buf[:n], []byte(want)), nil
}

// Plan says what Apply would do, writing nothing.
func (a trustApplier) Plan(_ context.Context, r spec.Resource) (Result, error) {
	ts, err := trustOf(r)
	if err != nil {
		return Result{}, err
	}
	d, err := a.planAnchor(ts.Name)
	if err != nil {
		return Result{}, err
	}
	d.at.close()
	return Result{Outcome: d.outcome()}, nil
}

// Apply installs the mesh root as the anchor r names: written atomically
// only when it is missing or differs, and then the store refreshed, once.
// A refresh that fails takes the anchor out again, so that the next pass
// writes it and refreshes again.
func (a trustApplier) Apply(ctx context.Context, r spec.Resource, w *Writes) (Result, error) {
	ts, err := trustOf(r)
	if err != nil {
		return Result{}, err
	}
	d, err := a.planAnchor(ts.Name)
	if err != nil {
		return Result{}, err
	}
	defer d.at.close()
	if !d.write {
		return Result{Outcome: spec.Unchanged}, nil
	}
	if err := d.at.makeParents(w); err != nil {
		return Result{}, err
	}
	if err := writeFileExact(d.at, []byte(a.caRoot), 0o644, -1, -1, w); err != nil {
		return Result{}, err
	}
	w.add()
	note, err := a.refresh(ctx, a.root, d.argv)
	if err != nil {
		w.add()
		unix.Unlinkat(d.at.dir, d.at.name, 0)
		return Result{}, fmt.Errorf("%w; %s was taken out again, and the next pass installs it again", err, d.at.path)
	}
	return Result{Outcome: d.outcome(), Note: note}, nil
}

// Remove deletes the anchor rec was and refreshes the store, which is then
// as it was before the anchor went in. A missing anchor (or no store at
// all) is nothing to do; something other than a regular file at its path is
// not the anchor, and stays.
func (a trustApplier) Remove(ctx context.Context, rec Applied, _ []string, w *Writes) (Result, error) {
	removed := Result{Outcome: spec.Removed}
	if err := spec.CheckName("trust", rec.Path); err != nil {
		return Result{}, fmt.Errorf("remove %s: %w", rec.Name, err)
	}
	store, argv, err := detectStore(a.root)
	if err != nil {
		return removed, nil // no store: nothing was installed in one
	}
	t, err := openTree(a.root)
	if err != nil {
		return Result{}, err
	}
	defer t.close()
	at, err := t.locate(store.dir + "/" + spec.TrustAnchorFile(rec.Path))
	if err != nil {
		return Result{}, err
	}
	defer at.close()
	st, ok, err := at.lstat()
	if err != nil || !ok || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return removed, err
	}
	w.add()
	if err := unix.Unlinkat(at.dir, at.name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return Result{}, fmt.Errorf("remove trust anchor %s: %w", at.path, err)
	}
	if err := at.syncDir(); err != nil {
		return Result{}, err
	}
	w.add()
	note, err := a.refresh(ctx, a.root, argv)
	if err != nil {
		return Result{}, err
	}
	removed.Note = note
	return removed, nil
}

// TrustInstalled is the anchor under root that holds caRoot, as the path
// the machine under root reads it at; "" when none does (or the host holds
// no root). Only files named as the trust kind names them (mesh-*.crt) are
// read.
func TrustInstalled(root, caRoot string) string {
	if caRoot == "" {
		return ""
	}
	t, err := openTree(root)
	if err != nil {
		return ""
	}
	defer t.close()
	for _, s := range trustStores {
		if ok, _ := isKind(t, s.dir, unix.S_IFDIR); !ok {
			continue
		}
		dir, err := t.locate(s.dir)
		if err != nil {
			continue
		}
		names, err := dir.names()
		dir.close()
		if err != nil {
			continue
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "mesh-") || !strings.HasSuffix(n, ".crt") {
				continue
			}
			p := s.dir + "/" + n
			if ok, _ := isKind(t, p, unix.S_IFREG); !ok {
				continue
			}
			at, err := t.locate(p)
			if err != nil {
				continue
			}
			same, _ := holds(at, caRoot)
			at.close()
			if same {
				return p
			}
		}
	}
	return ""
}
