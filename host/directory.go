package host

import (
	"context"
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

func init() {
	registerKind(hostKind{name: spec.KindDirectory,
		record: func(s spec.Spec, a *Applied) {
			if d, ok := s.(*spec.DirectorySpec); ok {
				a.OnRemove = d.OnRemove
			}
		},
		applier: func(s *Services) Applier { return directoryApplier{root: s.Root} }})
}

// directoryApplier holds directories under root: mode and (when declared)
// owner and group. Removed, an empty directory goes; what one holds that
// nothing declared goes only when its on_remove is delete (kept in the
// record).
type directoryApplier struct{ root string }

// directoryOf is r's directory spec.
func directoryOf(r spec.Resource) (*spec.DirectorySpec, error) {
	d, ok := spec.As[*spec.DirectorySpec](r)
	if !ok || d == nil {
		return nil, fmt.Errorf("resource %q has no directory spec", r.Name)
	}
	return d, nil
}

// dirDecision is what applying a directory takes, read from the machine.
type dirDecision struct {
	at       *spot // where the directory lies under the engine's root; the caller closes it
	uid, gid int
	exists   bool
	chown    bool
	chmod    bool
}

func (d dirDecision) outcome() string {
	switch {
	case !d.exists:
		return spec.Created
	case d.chown || d.chmod:
		return spec.Changed
	}
	return spec.Unchanged
}

// planDirectory reads what is at ds's path under root, exactly, and
// decides what applying ds takes. It writes nothing. On success the
// decision holds the directory's spot open: the caller closes it.
func planDirectory(root string, ds *spec.DirectorySpec) (dirDecision, error) {
	d := dirDecision{}
	var err error
	if d.uid, d.gid, err = ownerIDs(ds.Owner, ds.Group); err != nil {
		return d, err
	}
	at, st, ok, err := inspect(root, ds.Path)
	if err != nil {
		return d, err
	}
	d.at = at
	if !ok {
		return d, nil
	}
	d.exists = true
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		d.at.close()
		return d, fmt.Errorf("%s is at %s where a directory is declared; it is left in place", what(st.Mode), d.at.path)
	}
	d.chown, d.chmod = metaDrift(&st, ds.Mode, d.uid, d.gid)
	return d, nil
}

// Plan says what Apply would do to hold r, writing nothing.
func (a directoryApplier) Plan(_ context.Context, r spec.Resource) (Result, error) {
	ds, err := directoryOf(r)
	if err != nil {
		return Result{}, err
	}
	d, err := planDirectory(a.root, ds)
	if err != nil {
		return Result{}, err
	}
	d.at.close()
	return Result{Outcome: d.outcome()}, nil
}

// Apply makes the machine hold the directory r declares: created (0700,
// then chowned and chmodded to exactly what is declared), or its mode and
// owner fixed in place. What it holds is never touched.
func (a directoryApplier) Apply(_ context.Context, r spec.Resource, w *Writes) (Result, error) {
	ds, err := directoryOf(r)
	if err != nil {
		return Result{}, err
	}
	d, err := planDirectory(a.root, ds)
	if err != nil {
		return Result{}, err
	}
	defer d.at.close()
	if d.exists {
		if err := fixMeta(d.at, unix.S_IFDIR, ds.Mode, d.uid, d.gid, d.chown, d.chmod, w); err != nil {
			return Result{}, err
		}
		return Result{Outcome: d.outcome()}, nil
	}
	if err := d.at.makeParents(w); err != nil {
		return Result{}, err
	}
	w.add()
	if err := unix.Mkdirat(d.at.dir, d.at.name, 0o700); err != nil {
		return Result{}, fmt.Errorf("create directory %s: %w", d.at.path, err)
	}
	if err := fixMeta(d.at, unix.S_IFDIR, ds.Mode, d.uid, d.gid, d.uid >= 0 || d.gid >= 0, true, w); err != nil {
		return Result{}, err
	}
	return Result{Outcome: d.outcome()}, nil
}

// Remove removes the directory rec was. An empty one goes. One that holds
// anything goes with everything in it when its on_remove is delete (see
// deleteTree for when it stays all the same: held, the paths declared now,
// among them); otherwise (keep, the default) it is left in place with what
// it holds, which is no failure: the note says so. A missing directory is
// fine, and so is something else standing at its path (a file, a link): it
// is left in place.
func (a directoryApplier) Remove(_ context.Context, rec Applied, held []string, w *Writes) (Result, error) {
	note, err := a.remove(rec, held, w)
	return Result{Outcome: spec.Removed, Note: note}, err
}

func (a directoryApplier) remove(rec Applied, held []string, w *Writes) (string, error) {
	t, err := openTree(a.root)
	if err != nil {
		return "", err
	}
	defer t.close()
	at, err := locateRecorded(t, rec)
	if err != nil || at == nil {
		return "", err
	}
	defer at.close()
	st, ok, err := at.lstat()
	if err != nil || !ok {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// Not a directory, so not what rec was: whatever stands there is
		// someone else's, and stays.
		return "", nil
	}
	names, err := at.names()
	if err != nil {
		return "", fmt.Errorf("remove directory %s: list it: %w", at.path, err)
	}
	if len(names) == 0 {
		w.add()
		err := unix.Unlinkat(at.dir, at.name, unix.AT_REMOVEDIR)
		if err == nil {
			return "", at.syncDir()
		}
		if !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
			return "", fmt.Errorf("remove directory %s: %w", at.path, err)
		}
		names = []string{"entries that appeared as it was removed"}
	}
	if rec.OnRemove == spec.OnRemoveDelete {
		return "", deleteTree(at, rec.Path, held, w)
	}
	slices.Sort(names)
	return keptNote(names), nil
}

// keptNote says that a directory no longer declared stays with what it
// holds: how many entries, and the first few by name.
func keptNote(names []string) string {
	shown := names
	if len(shown) > 3 {
		shown = shown[:3]
	}
	list := strings.Join(shown, ", ")
	if len(names) > len(shown) {
		list += ", ..."
	}
	noun := "entries"
	if len(names) == 1 {
		noun = "entry"
	}
	return fmt.Sprintf("left in place with the %d %s it holds: %s; its on_remove is %s", len(names), noun, list, spec.OnRemoveKeep)
}

// deleteTree removes the directory at at (declared as p) with everything
// in it, links inside removed and never followed. It stays, and the error
// says why, when a path declared now (held) lies in it or when a file
// system is mounted in it (or on it). It was reached beneath the root (a
// link among its parents that leads outside fails before it is found), and
// the removal is made from a descriptor of its parent, so what is deleted is
// only ever under the host's root, on the file system the directory is on.
func deleteTree(at *spot, p string, held []string, w *Writes) error {
	for _, h := range held {
		if h == p || strings.HasPrefix(h, p+"/") {
			return fmt.Errorf("remove directory %s: %s in it is still declared, so it is left in place with everything in it", at.path, h)
		}
	}
	parent, err := fdPath(at.dir)
	if err != nil {
		return fmt.Errorf("remove directory %s: find its parent: %w; it is left in place with everything in it", at.path, err)
	}
	target := filepath.Join(parent, at.name)
	mounts, err := mountPoints()
	if err != nil {
		return fmt.Errorf("remove directory %s: %w; it is left in place with everything in it", at.path, err)
	}
	for _, m := range mounts {
		if m == target || strings.HasPrefix(m, target+"/") {
			return fmt.Errorf("remove directory %s: a file system is mounted at %s, so it is left in place with everything in it", at.path, m)
		}
	}
	// The parent, as a root of its own: RemoveAll below it opens every
	// directory it goes into without following a link.
	under, err := os.OpenRoot(procFd(at.dir))
	if err != nil {
		return fmt.Errorf("remove directory %s: open its parent: %w; it is left in place with everything in it", at.path, err)
	}
	defer under.Close()
	w.add()
	if err := under.RemoveAll(at.name); err != nil {
		return fmt.Errorf("remove directory %s with everything in it: %w", at.path, err)
	}
	return at.syncDir()
}

// mountPoints are the mount points of the host's mount namespace, as
// /proc/self/mountinfo lists them.
func mountPoints() ([]string, error) {
	body, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read the mount points: %w", err)
	}
	var points []string
	for _, line := range strings.Split(string(body), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		points = append(points, unescapeMount(fields[4]))
	}
	return points, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
