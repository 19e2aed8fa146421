package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"
	"sync/atomic"
)

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
