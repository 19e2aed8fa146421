package spec

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	Mesh      string    `json:"mesh"`
	Node      string    `json:"node"`
	Seq       uint64    `json:"seq"`
	Issued    time.Time `json:"issued"`
	Expires   time.Time `json:"expires"`
	Protocol  int       `json:"protocol"`
	Mode      string    `json:"mode,omitempty"`
	Resources Resources `json:"resources"`
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
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	e.buf.Reset()
	if err := e.encode(r); err != nil {
		return ""
	}
	sum := sha256.Sum256(e.buf.Bytes())
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
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	e.buf.Reset()
	if err := e.encode(r); err != nil {
		return nil, err
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

// Resources are resources that encode as one JSON array, into one buffer:
// each Resource encoded alone needs one of its own. They encode as
// []Resource does.
type Resources []Resource

// MarshalJSON writes the resources as a JSON array, null when nil.
func (rs Resources) MarshalJSON() ([]byte, error) {
	if rs == nil {
		return []byte("null"), nil
	}
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	e.buf.Reset()
	e.buf.WriteByte('[')
	for i, r := range rs {
		if i > 0 {
			e.buf.WriteByte(',')
		}
		if err := e.encode(r); err != nil {
			return nil, err
		}
	}
	e.buf.WriteByte(']')
	return bytes.Clone(e.buf.Bytes()), nil
}

// WriteResources writes rs to w as json.Marshal writes a []Resource (null
// when nil), each resource encoded into a pooled buffer and written on:
// the list is never gathered in memory (status digests every node's).
func WriteResources(w io.Writer, rs []Resource) error {
	if rs == nil {
		_, err := w.Write(jsonNullBytes)
		return err
	}
	e := encoders.Get().(*encoder)
	defer encoders.Put(e)
	e.buf.Reset()
	e.buf.WriteByte('[')
	for i, r := range rs {
		if i > 0 {
			e.buf.WriteByte(',')
		}
		if err := e.encode(r); err != nil {
			return err
		}
		if _, err := w.Write(e.buf.Bytes()); err != nil {
			return err
		}
		e.buf.Reset()
	}
	e.buf.WriteByte(']')
	_, err := w.Write(e.buf.Bytes())
	return err
}

var jsonNullBytes = []byte("null")

// encoder writes resources into buf; encoders keeps them between calls (a
// host encodes every resource of every pass to digest it).
type encoder struct {
	buf  bytes.Buffer
	enc  *json.Encoder
	head resourceHead // encoded through a pointer: no copy boxed per call
}

var encoders = sync.Pool{New: func() any {
	e := &encoder{}
	e.enc = json.NewEncoder(&e.buf)
	return e
}}

// encode appends r to e.buf as encoding/json writes a struct of its fields
// with the spec under its kind's name.
func (e *encoder) encode(r Resource) error {
	if plain(r.Name) && plain(r.Kind) && plain(r.Module) {
		e.buf.WriteString(`{"name":"`)
		e.buf.WriteString(r.Name)
		e.buf.WriteString(`","kind":"`)
		e.buf.WriteString(r.Kind)
		e.buf.WriteString(`","module":"`)
		e.buf.WriteString(r.Module)
		e.buf.WriteByte('"')
	} else {
		e.head = resourceHead{Name: r.Name, Kind: r.Kind, Module: r.Module}
		if err := e.enc.Encode(&e.head); err != nil {
			return err
		}
		e.buf.Truncate(e.buf.Len() - 2) // "}\n"
	}
	if r.Spec != nil && !nilSpec(r.Spec) {
		e.buf.WriteString(`,"`)
		e.buf.WriteString(r.Spec.Kind())
		e.buf.WriteString(`":`)
		if err := e.enc.Encode(r.Spec); err != nil {
			return err
		}
		e.buf.Truncate(e.buf.Len() - 1) // "\n"
	}
	e.buf.WriteByte('}')
	return nil
}

// plain says whether encoding/json writes s between quotes as it is:
// printable ASCII that it never escapes (no quote, backslash, <, > or &).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// nilSpec says whether s is a nil pointer of some kind's spec: no spec.
func nilSpec(s Spec) bool {
	v := reflect.ValueOf(s)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// UnmarshalJSON reads a resource as MarshalJSON writes it, refusing unknown
// fields (in the spec too), an unknown kind, a resource without its kind's
// spec, and one with another kind's, naming it; null is no resource either.
// It decodes as encoding/json decodes a struct with a field per registered
// kind.
func (r *Resource) UnmarshalJSON(b []byte) error {
	w := wire()
	v := reflect.New(w.resource)
	d := decoders.Get().(*decoder)
	d.src.Reset(b)
	if err := d.dec.Decode(v.Interface()); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "" {
			return fmt.Errorf("a resource is a JSON object, not %s", jsonType(b))
		}
		return err
	}
	decoders.Put(d) // only after a value decoded whole: it holds nothing of it
	if v.Elem().IsZero() && bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return errors.New("a resource is a JSON object, not null")
	}
	out, err := w.unwire(v.Elem())
	if err != nil {
		return err
	}
	*r = out
	return nil
}

// UnmarshalJSON reads resources as a JSON array (null: none), the whole
// array in one pass, refusing what Resource's UnmarshalJSON refuses.
func (rs *Resources) UnmarshalJSON(b []byte) error {
	w := wire()
	v := reflect.New(reflect.SliceOf(w.resource))
	d := decoders.Get().(*decoder)
	d.src.Reset(b)
	if err := d.dec.Decode(v.Interface()); err != nil {
		return err
	}
	decoders.Put(d) // only after a value decoded whole: it holds nothing of it
	out, err := w.unwireAll(v.Elem())
	if err != nil {
		return err
	}
	*rs = out
	return nil
}

// decodeDeclaration is Decode of a declaration: its resources decoded in
// the same pass as the rest, in their wire form, as a host receives it.
func decodeDeclaration(data []byte, d *Declaration) error {
	w := wire()
	v := reflect.New(w.declaration)
	if err := decode(data, v.Interface()); err != nil {
		return err
	}
	var out Declaration
	s, o := v.Elem(), reflect.ValueOf(&out).Elem()
	for i := range s.NumField() {
		if i != w.resources {
			o.Field(i).Set(s.Field(i))
		}
	}
	rs, err := w.unwireAll(s.Field(w.resources))
	if err != nil {
		return err
	}
	out.Resources = rs
	*d = out
	return nil
}

// decoder decodes one resource at a time from src, refusing unknown
// fields; decoders keeps them between calls, and the buffer each has
// grown.
type decoder struct {
	src bytes.Reader
	dec *json.Decoder
}

var decoders = sync.Pool{New: func() any {
	d := &decoder{}
	d.dec = json.NewDecoder(&d.src)
	d.dec.DisallowUnknownFields()
	return d
}}

// wireForm is how resources travel, as types encoding/json decodes in one
// pass: a resource is a struct of its name, kind and module, then a pointer
// to each registered kind's spec under the kind's name (kinds, in order);
// a declaration is Declaration with its resources of that type.
type wireForm struct {
	resource    reflect.Type
	kinds       []string
	declaration reflect.Type
	resources   int // the field of declaration that holds them
}

// wires is the wireForm of the kinds registered so far; Register drops
// it.
var wires atomic.Pointer[wireForm]

func wire() *wireForm {
	if w := wires.Load(); w != nil {
		return w
	}
	str := reflect.TypeFor[string]()
	fields := []reflect.StructField{
		{Name: "Name", Type: str, Tag: `json:"name"`},
		{Name: "Kind", Type: str, Tag: `json:"kind"`},
		{Name: "Module", Type: str, Tag: `json:"module"`},
	}
	w := &wireForm{}
	for i, k := range Kinds() {
		fields = append(fields, reflect.StructField{Name: fmt.Sprintf("Spec%d", i), Type: reflect.TypeOf(k.New()), Tag: reflect.StructTag(`json:"` + k.Name + `"`)})
		w.kinds = append(w.kinds, k.Name)
	}
	w.resource = reflect.StructOf(fields)
	decl := reflect.TypeFor[Declaration]()
	fields = nil
	for i := range decl.NumField() {
		f := decl.Field(i)
		if f.Name == "Resources" {
			f.Type, w.resources = reflect.SliceOf(w.resource), i
		}
		fields = append(fields, f)
	}
	w.declaration = reflect.StructOf(fields)
	wires.Store(w)
	return w
}

// unwireAll is the resources the slice s (of w.resource) holds; nil when
// it is nil.
func (w *wireForm) unwireAll(s reflect.Value) (Resources, error) {
	if s.IsNil() {
		return nil, nil
	}
	out := make(Resources, s.Len())
	for i := range out {
		r, err := w.unwire(s.Index(i))
		if err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		out[i] = r
	}
	return out, nil
}

// unwire is the resource s (of type w.resource) holds, refusing an
// unknown kind, a missing spec and another kind's.
func (w *wireForm) unwire(s reflect.Value) (Resource, error) {
	out := Resource{Name: s.Field(0).String(), Kind: s.Field(1).String(), Module: s.Field(2).String()}
	var specKind string
	for i, name := range w.kinds {
		f := s.Field(3 + i)
		if f.IsNil() {
			continue
		}
		if specKind != "" {
			return Resource{}, fmt.Errorf("a resource carries both a %s and a %s spec", specKind, name)
		}
		specKind, out.Spec = name, f.Interface().(Spec)
	}
	switch _, known := KindNamed(out.Kind); {
	case !known:
		return Resource{}, fmt.Errorf("resource %q: unknown kind %q", out.Name, out.Kind)
	case specKind == "":
		return Resource{}, fmt.Errorf("resource %q: kind %s has no %s spec", out.Name, out.Kind, out.Kind)
	case specKind != out.Kind:
		return Resource{}, fmt.Errorf("resource %q: kind %s carries a %s spec: a resource carries its own kind's spec only", out.Name, out.Kind, specKind)
	}
	return out, nil
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
