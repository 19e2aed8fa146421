package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/mesh-fleet/mesh/spec"
)

// directoryApplier holds directories: mode and (when declared) owner and
// group. It never removes what it did not make: only an empty directory
// goes.
type directoryApplier struct{}

// dirDecision is what applying a directory takes, read from the machine.
type dirDecision struct {
	path     string
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

// planDirectory reads what is at ds's path, exactly, and decides what
// applying ds takes. It writes nothing.
func planDirectory(root string, ds *spec.DirectorySpec) (dirDecision, error) {
	d := dirDecision{path: filepath.Join(root, ds.Path)}
	var err error
	if d.uid, d.gid, err = ownerIDs(ds.Owner, ds.Group); err != nil {
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
		return d, nil
	}
	d.exists = true
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return d, fmt.Errorf("%s is at %s where a directory is declared; it is left in place", what(st.Mode), d.path)
	}
	d.chown, d.chmod = metaDrift(&st, ds.Mode, d.uid, d.gid)
	return d, nil
}

// Plan says what Apply would do to hold r, writing nothing.
func (directoryApplier) Plan(root string, r spec.Resource) (string, error) {
	if r.Directory == nil {
		return "", fmt.Errorf("resource %q has no directory spec", r.Name)
	}
	d, err := planDirectory(root, r.Directory)
	if err != nil {
		return "", err
	}
	return d.outcome(), nil
}

// Apply makes the machine hold the directory r declares: created (0700,
// then chowned and chmodded to exactly what is declared), or its mode and
// owner fixed in place. What it holds is never touched.
func (directoryApplier) Apply(_ context.Context, root string, r spec.Resource, _ BlobFetcher, w *Writes) (string, error) {
	ds := r.Directory
	if ds == nil {
		return "", fmt.Errorf("resource %q has no directory spec", r.Name)
	}
	d, err := planDirectory(root, ds)
	if err != nil {
		return "", err
	}
	if d.exists {
		if err := fixMeta(d.path, ds.Mode, d.uid, d.gid, d.chown, d.chmod, w); err != nil {
			return "", err
		}
		return d.outcome(), nil
	}
	if err := makeParents(d.path, w); err != nil {
		return "", err
	}
	w.add()
	if err := os.Mkdir(d.path, 0o700); err != nil {
		return "", fmt.Errorf("create directory %s: %w", d.path, err)
	}
	if err := fixMeta(d.path, ds.Mode, d.uid, d.gid, d.uid >= 0 || d.gid >= 0, true, w); err != nil {
		return "", err
	}
	return d.outcome(), nil
}

// Remove removes the directory a was, only if it is empty: entries nobody
// declared are not ours to delete, so a directory that holds any stays and
// the error says how many. A missing directory is fine, and so is something
// else standing at its path (a file, a link): it is left in place.
func (directoryApplier) Remove(root string, a Applied, w *Writes) error {
	path, err := recordedPath(root, a)
	if err != nil {
		return err
	}
	st, ok, err := lstatExact(path)
	if err != nil || !ok {
		return err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		// Not a directory, so not what a was: whatever stands there is
		// someone else's, and stays.
		return nil
	}
	d, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("remove directory %s: %w", path, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("remove directory %s: list it: %w", path, err)
	}
	if len(names) > 0 {
		slices.Sort(names)
		return notEmpty(path, names)
	}
	w.add()
	if err := syscall.Rmdir(path); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("remove directory %s: entries appeared in it; it is left in place: %w", path, err)
		}
		return fmt.Errorf("remove directory %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// notEmpty is the error for a directory that still holds entries nothing
// declared: how many, and the first few by name.
func notEmpty(path string, names []string) error {
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
	return fmt.Errorf("remove directory %s: %d %s nothing declared remain in it (%s), not ours to delete, so it is left in place: %w",
		path, len(names), noun, list, syscall.ENOTEMPTY)
}
