package spec

import (
	"bytes"
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

// Resource is one thing a node holds: its spec is of its kind. In JSON
// the spec travels under the kind's name:
// {"name":...,"kind":"file","module":...,"file":{...}}.
type Resource struct {
	// Name is unique within a declaration: "<module>:<kind>:<path>".
	Name   string
	Kind   string
	Module string
	Spec   Spec
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

// Target is what the resource manages: a path, or a name.
func (r Resource) Target() string {
	if r.Spec == nil {
		return ""
	}
	return r.Spec.Target()
}

// Key is what no two resources of a node may share: the path of a kind
// with paths (a file and a directory may not both be at /x), or else the
// kind and its target ("container web").
func (r Resource) Key() string {
	if k, ok := KindNamed(r.Kind); ok && k.Path {
		return r.Target()
	}
	return r.Kind + " " + r.Target()
}

// Digest is the resource's identity: the SHA-256 of its declared spec. Two
// resources with the same digest are the same thing to hold.
func (r Resource) Digest() string {
	body, _ := r.MarshalJSON() // the bytes json.Marshal(r) writes, without its second pass over them
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
	if _, ok := KindNamed(r.Kind); !ok {
		return fmt.Errorf("resource %q: unknown kind %q", r.Name, r.Kind)
	}
	if r.Spec == nil || r.Spec.Kind() != r.Kind {
		return fmt.Errorf("resource %q: kind %s needs exactly a %s spec", r.Name, r.Kind, r.Kind)
	}
	if err := r.Spec.Check(); err != nil {
		return fmt.Errorf("resource %q: %w", r.Name, err)
	}
	if r.Name == "" {
		return fmt.Errorf("a %s resource has no name", r.Kind)
	}
	return nil
}

// jsonType names the type of the JSON value b.
func jsonType(b []byte) string {
	switch b = bytes.TrimSpace(b); {
	case len(b) == 0:
		return "nothing"
	case b[0] == '"':
		return "a string"
	case b[0] == '[':
		return "an array"
	case b[0] == 'n':
		return "null"
	case b[0] == 't' || b[0] == 'f':
		return "a boolean"
	}
	return "a number"
}

// resourceHead is a resource's fields before its spec, in the order they
// travel.
type resourceHead struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Module string `json:"module"`
}

// MarshalJSON writes {"name":...,"kind":...,"module":...,"KIND":{...}}, the
// spec under its kind's name: the bytes whose SHA-256 is the resource's
// Digest, which hosts compare.
func (r Resource) MarshalJSON() ([]byte, error) {
	head, err := json.Marshal(resourceHead{Name: r.Name, Kind: r.Kind, Module: r.Module})
	if err != nil || r.Spec == nil {
		return head, err
	}
	body, err := json.Marshal(r.Spec)
	if err != nil {
		return nil, err
	}
	if string(body) == "null" { // a nil spec of some kind: none
		return head, nil
	}
	key := r.Spec.Kind()
	out := make([]byte, 0, len(head)+len(key)+len(body)+5)
	out = append(out, head[:len(head)-1]...)
	out = append(out, `,"`...)
	out = append(out, key...)
	out = append(out, `":`...)
	out = append(out, body...)
	return append(out, '}'), nil
}

// UnmarshalJSON reads a resource as MarshalJSON writes it, refusing unknown
// fields (in the spec too), an unknown kind, a resource without its kind's
// spec, and one with another kind's, naming it; null is no resource either.
func (r *Resource) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return fmt.Errorf("a resource is a JSON object, not %s", jsonType(b))
	}
	var out Resource
	var specKind string
	var specRaw json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		var field *string
		switch {
		case strings.EqualFold(key, "name"):
			field = &out.Name
		case strings.EqualFold(key, "kind"):
			field = &out.Kind
		case strings.EqualFold(key, "module"):
			field = &out.Module
		}
		if field != nil {
			if err := json.Unmarshal(raw, field); err != nil {
				return fmt.Errorf("resource field %s: %w", key, err)
			}
			continue
		}
		k, ok := kindByKey(key)
		if !ok {
			return fmt.Errorf("json: unknown field %q", key)
		}
		if jsonNull(raw) {
			continue
		}
		if specKind != "" && specKind != k.Name {
			return fmt.Errorf("a resource carries both a %s and a %s spec", specKind, k.Name)
		}
		specKind, specRaw = k.Name, raw
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	k, ok := KindNamed(out.Kind)
	switch {
	case !ok:
		return fmt.Errorf("resource %q: unknown kind %q", out.Name, out.Kind)
	case specKind == "":
		return fmt.Errorf("resource %q: kind %s has no %s spec", out.Name, out.Kind, out.Kind)
	case specKind != out.Kind:
		return fmt.Errorf("resource %q: kind %s carries a %s spec: a resource carries its own kind's spec only", out.Name, out.Kind, specKind)
	}
	out.Spec = k.New()
	if err := Decode(specRaw, out.Spec); err != nil {
		return fmt.Errorf("resource %q: %s: %w", out.Name, out.Kind, err)
	}
	*r = out
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
