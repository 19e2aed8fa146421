package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

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

// Resources are resources that encode as one JSON array, into one buffer:
// each Resource encoded alone needs one of its own. They encode as
// []Resource does.
type Resources []Resource

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

// ResourceName is the name a module's resource of kind at p carries.
func ResourceName(module, kind, p string) string { return module + ":" + kind + ":" + p }
