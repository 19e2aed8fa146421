package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// Limits on the wire (DESIGN.md, "On the wire").
const (
	// MaxDeclaration is the cap on a declaration's signed bytes.
	MaxDeclaration = 1 << 20
	// InlineMax is the largest file content carried inside a declaration;
	// anything larger travels as a blob fetched by digest.
	InlineMax = 64 << 10
	// BlobChunk is the size of one blob chunk on the bus.
	BlobChunk = 512 << 10
	// SigHeader carries the detached ed25519 signature, base64.
	SigHeader = "Mesh-Sig"
	// DefaultExpiry is how long a declaration may be applied after it is issued.
	DefaultExpiry = 24 * time.Hour
	// ClockSkew is the skew allowed between controller and host clocks.
	ClockSkew = 5 * time.Minute
)

// Modes of a declaration.
const (
	ModeApply   = ""        // apply and keep
	ModePreview = "preview" // work out what would change; never stored, acked or applied
)

// Kinds of resource.
const (
	KindFile      = "file"
	KindDirectory = "directory"
)

// Declaration is everything one node should hold, numbered and signed by the
// controller. Its encoded bytes are exactly what is signed.
type Declaration struct {
	Mesh      string     `json:"mesh"`
	Node      string     `json:"node"`
	Seq       uint64     `json:"seq"`
	Issued    time.Time  `json:"issued"`
	Expires   time.Time  `json:"expires"`
	Protocol  int        `json:"protocol"`
	Mode      string     `json:"mode,omitempty"`
	Resources []Resource `json:"resources"`
	// Roster is every name of the mesh, the same in every node's declaration.
	Roster Roster `json:"roster"`
}

// Resource is one thing a node holds. Exactly one of the kind's specs is set.
type Resource struct {
	// Name is unique within a declaration: "<module>:<kind>:<path>".
	Name      string         `json:"name"`
	Kind      string         `json:"kind"`
	Module    string         `json:"module"`
	File      *FileSpec      `json:"file,omitempty"`
	Directory *DirectorySpec `json:"directory,omitempty"`
	Network   *NetworkSpec   `json:"network,omitempty"`
	Container *ContainerSpec `json:"container,omitempty"`
}

// FileSpec is a file: its content inline (Content) or as a blob (Blob), and
// always its digest.
type FileSpec struct {
	Path    string `json:"path"`
	Mode    Mode   `json:"mode"`
	Owner   string `json:"owner,omitempty"` // user name or numeric id; empty: not managed
	Group   string `json:"group,omitempty"`
	Content []byte `json:"content,omitempty"`
	Blob    bool   `json:"blob,omitempty"` // the content travels as the blob named by Digest
	Size    int64  `json:"size"`
	Digest  string `json:"digest"` // sha256:HEX of the content
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

// Mode is a Unix permission mode (07777 at most), written in JSON as an
// octal string ("0644").
type Mode uint32

// MarshalJSON writes the mode as "0644".
func (m Mode) MarshalJSON() ([]byte, error) { return json.Marshal(fmt.Sprintf("%04o", uint32(m))) }

// UnmarshalJSON reads an octal string of at most 07777.
func (m *Mode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("mode must be an octal string such as \"0644\"")
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 || s == "" {
		return fmt.Errorf("mode %q is not an octal mode from 0000 to 7777", s)
	}
	*m = Mode(v)
	return nil
}

// CheckFile refuses a file mode that is setuid or setgid and writable by
// anyone: anyone on the machine could replace a program that runs with its
// owner's or its group's rights.
func (m Mode) CheckFile() error {
	if m&0o6000 != 0 && m&0o002 != 0 {
		return fmt.Errorf("mode %04o is setuid or setgid and writable by anyone, so anyone could replace a program that runs with its owner's or group's rights: drop the s bit or o+w (such as %04o)", uint32(m), uint32(m&^0o002))
	}
	return nil
}

// Target is the path the resource manages.
func (r Resource) Target() string {
	switch {
	case r.File != nil:
		return r.File.Path
	case r.Directory != nil:
		return r.Directory.Path
	case r.Network != nil:
		return r.Network.Name
	case r.Container != nil:
		return r.Container.Name
	}
	return ""
}

// specs counts the kind specs r carries; a well-formed resource has one.
func (r Resource) specs() int {
	n := 0
	for _, set := range []bool{r.File != nil, r.Directory != nil, r.Network != nil, r.Container != nil} {
		if set {
			n++
		}
	}
	return n
}

// Digest is the resource's identity: the SHA-256 of its declared spec. Two
// resources with the same digest are the same thing to hold.
func (r Resource) Digest() string {
	body, _ := json.Marshal(r)
	sum := sha256.Sum256(body)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ResourceName is the name a module's resource of kind at p carries.
func ResourceName(module, kind, p string) string { return module + ":" + kind + ":" + p }

// ContentDigest is "sha256:HEX" of b.
func ContentDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CheckPath refuses a path that is not absolute and clean, or is the root.
func CheckPath(p string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q is not absolute", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean (it should read %q)", p, path.Clean(p))
	case p == "/":
		return fmt.Errorf("path %q is the root directory", p)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("path %q holds a NUL byte", p)
	}
	return nil
}

// Check refuses a resource that is not well formed: what a host checks
// before it touches anything.
func (r Resource) Check() error {
	switch r.Kind {
	case KindFile:
		if r.File == nil || r.specs() != 1 {
			return fmt.Errorf("resource %q: kind file needs exactly a file spec", r.Name)
		}
		if err := CheckPath(r.File.Path); err != nil {
			return fmt.Errorf("resource %q: %w", r.Name, err)
		}
		if err := r.File.Mode.CheckFile(); err != nil {
			return fmt.Errorf("resource %q: %w", r.Name, err)
		}
		if !strings.HasPrefix(r.File.Digest, "sha256:") || len(r.File.Digest) != 71 {
			return fmt.Errorf("resource %q: digest %q is not sha256:HEX", r.Name, r.File.Digest)
		}
		if r.File.Blob && len(r.File.Content) > 0 {
			return fmt.Errorf("resource %q: both inline content and a blob", r.Name)
		}
		if !r.File.Blob && (int64(len(r.File.Content)) != r.File.Size || ContentDigest(r.File.Content) != r.File.Digest) {
			return fmt.Errorf("resource %q: inline content does not match its size and digest", r.Name)
		}
	case KindDirectory:
		if r.Directory == nil || r.specs() != 1 {
			return fmt.Errorf("resource %q: kind directory needs exactly a directory spec", r.Name)
		}
		if err := CheckPath(r.Directory.Path); err != nil {
			return fmt.Errorf("resource %q: %w", r.Name, err)
		}
		if err := CheckOnRemove(r.Directory.OnRemove); err != nil {
			return fmt.Errorf("resource %q: %w", r.Name, err)
		}
	case KindNetwork:
		if r.Network == nil || r.specs() != 1 {
			return fmt.Errorf("resource %q: kind network needs exactly a network spec", r.Name)
		}
		if err := r.Network.Check(); err != nil {
			return fmt.Errorf("resource %q: %w", r.Name, err)
		}
	case KindContainer:
		if r.Container == nil || r.specs() != 1 {
			return fmt.Errorf("resource %q: kind container needs exactly a container spec", r.Name)
		}
		if err := r.Container.Check(); err != nil {
			return fmt.Errorf("resource %q: %w", r.Name, err)
		}
	default:
		return fmt.Errorf("resource %q: unknown kind %q", r.Name, r.Kind)
	}
	if r.Name == "" {
		return fmt.Errorf("a %s resource has no name", r.Kind)
	}
	return nil
}

// Outcomes of one resource in a report.
const (
	Created   = "created"
	Changed   = "changed"
	Unchanged = "unchanged"
	Removed   = "removed"
	Failed    = "failed"
)

// Report is what a host says after it handled a declaration: each
// resource's outcome, or why the whole declaration was refused. Published on
// mesh.node.<node>.report.
type Report struct {
	Node string    `json:"node"`
	Time time.Time `json:"time"`
	Seq  uint64    `json:"seq"`
	// Digest is the SHA-256 of the declaration's signed bytes.
	Digest string `json:"digest"`
	// Refused, when set, says why nothing was applied.
	Refused string `json:"refused,omitempty"`
	// Reconcile is set on a report of a periodic pass that corrected drift.
	Reconcile bool `json:"reconcile,omitempty"`
	Preview   bool `json:"preview,omitempty"`
	// Writes counts the changing calls the apply made, to the filesystem
	// and to the container engine: zero when nothing differed.
	Writes int `json:"writes"`
	// ApplyMicros is how long the apply took, in microseconds.
	ApplyMicros int64            `json:"apply_us,omitempty"`
	Results     []ResourceResult `json:"results"`
	// Omitted counts the results the controller did not keep: a report is
	// kept within MaxReportResults and MaxReportKept (a host sends none).
	Omitted int `json:"omitted,omitempty"`
}

// ResourceResult is one resource's outcome.
type ResourceResult struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	// Note says more of a change: a container started again at reconcile,
	// and why it had stopped.
	Note string `json:"note,omitempty"`
}

// BlobRequest asks the controller for one chunk of a blob the node's
// declaration names, on mesh.node.<node>.blob.
type BlobRequest struct {
	Digest string `json:"digest"`
	Offset int64  `json:"offset"`
}

// BlobChunkReply is one chunk; Data is empty past the end.
type BlobChunkReply struct {
	Size int64  `json:"size"`
	Data []byte `json:"data"`
}
