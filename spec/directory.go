package spec

import "fmt"

// KindDirectory is a directory: its mode and (when declared) owner.
const KindDirectory = "directory"

func init() {
	Register(Kind{Name: KindDirectory, Path: true,
		New: func() Spec { return &DirectorySpec{} },
		Manifest: func(raw []byte) (Declared, error) {
			m := &directoryManifest{DirectorySpec{Mode: 0o755}}
			return m, Decode(raw, m)
		}})
}

// DirectorySpec is a directory.
type DirectorySpec struct {
	Path  string `json:"path"`
	Mode  Mode   `json:"mode"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// OnRemove is what removing the directory does with what it holds that
	// nothing declares: OnRemoveKeep (empty means the same) or
	// OnRemoveDelete.
	OnRemove string `json:"on_remove,omitempty"`
}

// What removing a directory does with contents nothing declares.
const (
	// OnRemoveKeep leaves a directory that holds anything in place, with
	// what it holds, and says so in a note: the default.
	OnRemoveKeep = "keep"
	// OnRemoveDelete removes the directory with everything in it (never
	// past the host's root, nor onto another file system).
	OnRemoveDelete = "delete"
)

// CheckOnRemove refuses a directory's on_remove that is none of the
// values allowed, naming them.
func CheckOnRemove(v string) error {
	if v != "" && v != OnRemoveKeep && v != OnRemoveDelete {
		return fmt.Errorf("on_remove %q is not one of %s (the default) and %s", v, OnRemoveKeep, OnRemoveDelete)
	}
	return nil
}

// Kind is KindDirectory.
func (*DirectorySpec) Kind() string { return KindDirectory }

// Target is the directory's path.
func (d *DirectorySpec) Target() string { return d.Path }

// Check refuses a directory that is not well formed.
func (d *DirectorySpec) Check() error {
	if err := CheckPath(d.Path); err != nil {
		return err
	}
	return CheckOnRemove(d.OnRemove)
}

// Fill fills the path, owner and group.
func (d *DirectorySpec) Fill(fill func(field, s string) (string, error)) (Spec, error) {
	c := *d
	var err error
	if c.Path, err = fill("path", d.Path); err != nil {
		return nil, err
	}
	if c.Owner, err = fill("owner", d.Owner); err != nil {
		return nil, err
	}
	if c.Group, err = fill("group", d.Group); err != nil {
		return nil, err
	}
	return &c, nil
}

// Blobs is none.
func (*DirectorySpec) Blobs() []Blob { return nil }

// Row lists the directory: what its removal does with what it holds.
func (d *DirectorySpec) Row() Row {
	content := "-"
	if d.OnRemove == OnRemoveDelete {
		content = "on_remove delete: removed with its contents"
	}
	return Row{Target: d.Path, Mode: fmt.Sprintf("%04o", uint32(d.Mode)), Owner: ownerColumn(d.Owner, d.Group), Content: content}
}

// directoryManifest is a directory in module.json: the DirectorySpec, its
// mode 0755 when not given, on_remove keep when not given.
type directoryManifest struct{ DirectorySpec }

// Spec is the directory as declared.
func (m *directoryManifest) Spec() Spec { d := m.DirectorySpec; return &d }

// Check refuses an on_remove none of those allowed, and a path that is not
// absolute and clean.
func (m *directoryManifest) Check(field string) error {
	if err := CheckOnRemove(m.OnRemove); err != nil {
		return fmt.Errorf("%s.on_remove: %w", field, err)
	}
	if err := CheckPath(m.Path); err != nil {
		return fmt.Errorf("%s.path: %w", field, err)
	}
	return nil
}

// Resolve is the directory, its on_remove keep (the default) left out: one
// spelling, one digest.
func (m *directoryManifest) Resolve(string, func(string) (Content, error)) (Spec, error) {
	d := m.DirectorySpec
	if d.OnRemove != OnRemoveDelete {
		d.OnRemove = ""
	}
	return &d, nil
}
