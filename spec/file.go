package spec

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// KindFile is a file: its content, mode and (when declared) owner.
const KindFile = "file"

func init() {
	Register(Kind{Name: KindFile, Path: true,
		New: func() Spec { return &FileSpec{} },
		Manifest: func(raw []byte) (Declared, error) {
			m := &fileManifest{FileSpec: FileSpec{Mode: 0o644}}
			err := Decode(raw, m)
			if m.Mode != nil {
				m.FileSpec.Mode = *m.Mode
			}
			return m, err
		}})
}

// FileSpec is a file: its content inline (Content), as a blob (Blob) or
// sealed to the node (Sealed), and always its digest.
type FileSpec struct {
	Path    string `json:"path"`
	Mode    Mode   `json:"mode"`
	Owner   string `json:"owner,omitempty"` // user name or numeric id; empty: not managed
	Group   string `json:"group,omitempty"`
	Content []byte `json:"content,omitempty"`
	Blob    bool   `json:"blob,omitempty"` // the content travels as the blob named by Digest
	// Secret says that the content holds a secret setting's value: the
	// controller seals it to the node before it sends it (Sealed).
	Secret bool `json:"secret,omitempty"`
	// Sealed is the content sealed to the node's sealing key, Content then
	// empty and Digest keyed (SealedDigestPrefix): the declaration shows
	// neither the value nor a digest a guess of it could be tested against.
	Sealed string `json:"sealed,omitempty"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"` // sha256:HEX of the content; keyed when sealed
	// OnChange, when set, names a container of the file's module that is
	// signalled or restarted when the file's content changes, so a daemon
	// that reads the file at start takes the new one without being
	// replaced.
	OnChange *OnChange `json:"on_change,omitempty"`
}

// OnChange is what a file's change does to a container of its module:
// send it Signal, or restart it.
type OnChange struct {
	Container string `json:"container"`
	Signal    string `json:"signal,omitempty"`
	Restart   bool   `json:"restart,omitempty"`
}

// reloadSignals are the signals on_change may send.
var reloadSignals = []string{"SIGHUP", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGQUIT", "SIGTERM", "SIGWINCH"}

// Check refuses an on_change that names no container, or both or neither
// of a signal and a restart, or a signal not among reloadSignals.
func (o *OnChange) Check() error {
	if err := CheckName("container", o.Container); err != nil {
		return fmt.Errorf("on_change: %w", err)
	}
	if (o.Signal != "") == o.Restart {
		return errors.New("on_change: give exactly one of signal and restart")
	}
	if o.Signal != "" && !slices.Contains(reloadSignals, o.Signal) {
		return fmt.Errorf("on_change: signal %q is not one of %s", o.Signal, strings.Join(reloadSignals, ", "))
	}
	return nil
}

// SealedDigestPrefix begins a sealed file's digest: an HMAC of its content
// under a key only the controller holds.
const SealedDigestPrefix = "hmac-sha256:"

// Kind is KindFile.
func (*FileSpec) Kind() string { return KindFile }

// Target is the file's path.
func (f *FileSpec) Target() string { return f.Path }

// Check refuses a file that is not well formed.
func (f *FileSpec) Check() error {
	if err := CheckPath(f.Path); err != nil {
		return err
	}
	if err := f.Mode.CheckFile(); err != nil {
		return err
	}
	if f.OnChange != nil {
		if err := f.OnChange.Check(); err != nil {
			return err
		}
	}
	if f.Sealed != "" {
		switch {
		case !f.Secret || f.Blob || len(f.Content) > 0:
			return errors.New("sealed content with inline content or a blob, or not secret")
		case !strings.HasPrefix(f.Digest, SealedDigestPrefix) || len(f.Digest) != len(SealedDigestPrefix)+64:
			return fmt.Errorf("a sealed file's digest is not %sHEX", SealedDigestPrefix)
		}
		return nil
	}
	if f.Secret && f.Blob {
		return errors.New("secret content in a blob: a secret is inline")
	}
	if !strings.HasPrefix(f.Digest, "sha256:") || len(f.Digest) != 71 {
		return fmt.Errorf("digest %q is not sha256:HEX", f.Digest)
	}
	if f.Blob && len(f.Content) > 0 {
		return errors.New("both inline content and a blob")
	}
	if !f.Blob && (int64(len(f.Content)) != f.Size || ContentDigest(f.Content) != f.Digest) {
		return errors.New("inline content does not match its size and digest")
	}
	return nil
}

// Fill fills the path, owner, group and inline content (a blob is copied as
// it is), and sizes and digests the content anew.
func (f *FileSpec) Fill(fill func(field, s string) (string, error)) (Spec, error) {
	c := *f
	var err error
	if c.Path, err = fill("path", f.Path); err != nil {
		return nil, err
	}
	if c.Owner, err = fill("owner", f.Owner); err != nil {
		return nil, err
	}
	if c.Group, err = fill("group", f.Group); err != nil {
		return nil, err
	}
	if !c.Blob {
		text, err := fill("content", string(f.Content))
		if err != nil {
			return nil, err
		}
		c.Content = []byte(text)
		c.Size, c.Digest = int64(len(c.Content)), ContentDigest(c.Content)
	}
	return &c, nil
}

// Blobs is the content, when it travels as a blob.
func (f *FileSpec) Blobs() []Blob {
	if !f.Blob {
		return nil
	}
	return []Blob{{Digest: f.Digest, Size: f.Size}}
}

// Row lists the file: its size and digest.
func (f *FileSpec) Row() Row {
	content := fmt.Sprintf("%d bytes %s", f.Size, f.Digest[:min(19, len(f.Digest))])
	if f.Blob {
		content += " (blob)"
	}
	return Row{Target: f.Path, Mode: fmt.Sprintf("%04o", uint32(f.Mode)), Owner: ownerColumn(f.Owner, f.Group), Content: content}
}

// ownerColumn is an owner and group as `mesh module show` lists them.
func ownerColumn(user, group string) string {
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	if user == "" && group == "" {
		return "-"
	}
	return dash(user) + ":" + dash(group)
}

// fileManifest is a file in module.json: the FileSpec, its mode (0644 when
// not given, 0600 when its content uses a secret setting), and its content
// inline or Source, a file beside the manifest. Size, digest, blob and
// whether it is secret or sealed are worked out, never written.
type fileManifest struct {
	FileSpec
	Mode    *Mode     `json:"mode,omitempty"`
	Content *string   `json:"content,omitempty"`
	Source  string    `json:"source,omitempty"`
	Size    workedOut `json:"size"`
	Digest  workedOut `json:"digest"`
	Blob    workedOut `json:"blob"`
	Secret  workedOut `json:"secret"`
	Sealed  workedOut `json:"sealed"`
}

// secretContent has a file whose content uses a secret setting default to
// mode 0600.
func (m *fileManifest) secretContent() {
	if m.Mode == nil {
		m.FileSpec.Mode = 0o600
	}
}

// workedOut is a field of a spec that module.json does not give: the CLI
// works it out from the content.
type workedOut struct{}

// UnmarshalJSON refuses the field.
func (*workedOut) UnmarshalJSON([]byte) error {
	return errors.New("size, digest, blob, secret and sealed are not written in module.json: they are worked out from content, source and settings")
}

// Spec is the file as declared: inline content as it stands, a source's
// not read.
func (m *fileManifest) Spec() Spec {
	f := m.FileSpec
	if m.Content != nil {
		f.Content = []byte(*m.Content)
	}
	return &f
}

// Check refuses a mode that lets anyone replace a setuid program, both or
// neither of content and source, a source outside the module's directory,
// and a path that is not absolute and clean.
func (m *fileManifest) Check(field string) error {
	if err := m.FileSpec.Mode.CheckFile(); err != nil {
		return fmt.Errorf("%s.mode: %w", field, err)
	}
	if m.OnChange != nil {
		if err := m.OnChange.Check(); err != nil {
			return fmt.Errorf("%s.%w", field, err)
		}
	}
	if hasContent, hasSource := m.Content != nil, m.Source != ""; hasContent == hasSource {
		return fmt.Errorf("%s: give exactly one of content and source", field)
	}
	if m.Source != "" && !cleanSource(m.Source) {
		return fmt.Errorf("%s.source: %q must be a clean path inside the module's directory", field, m.Source)
	}
	if err := CheckPath(m.Path); err != nil {
		return fmt.Errorf("%s.path: %w", field, err)
	}
	return nil
}

// Resolve reads the source, if any: content over InlineMax travels as a
// blob.
func (m *fileManifest) Resolve(field string, read func(source string) (Content, error)) (Spec, error) {
	var c Content
	if m.Content != nil {
		c = ContentOf([]byte(*m.Content))
	} else {
		var err error
		if c, err = read(m.Source); err != nil {
			return nil, fmt.Errorf("%s.source: %w", field, err)
		}
		if c.Size <= InlineMax && int64(len(c.Data)) != c.Size {
			return nil, fmt.Errorf("%s.source: %d bytes were read of its %d", field, len(c.Data), c.Size)
		}
	}
	f := m.FileSpec
	f.Size, f.Digest = c.Size, c.Digest
	if c.Size > InlineMax {
		f.Blob = true
	} else {
		f.Content = c.Data
	}
	return &f, nil
}

// checkOnChange refuses a file, or a provided file, whose on_change names
// a container its module does not declare: a change could then signal
// another module's.
func checkOnChange(module string, resources []Resource, provides []Provide) error {
	containers := map[string]bool{}
	for _, r := range resources {
		if c, ok := r.Spec.(*ContainerSpec); ok {
			containers[c.Name] = true
		}
	}
	for _, r := range resources {
		if f, ok := r.Spec.(*FileSpec); ok && f.OnChange != nil && !containers[f.OnChange.Container] {
			return fmt.Errorf("module %q: file %s: on_change names container %q, which the module does not declare", module, f.Path, f.OnChange.Container)
		}
	}
	for _, p := range provides {
		if oc := p.File.OnChange; oc != nil && !containers[oc.Container] {
			return fmt.Errorf("module %q: grant %s's file: on_change names container %q, which the module does not declare", module, p.Grant, oc.Container)
		}
	}
	return nil
}
