package spec

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Spec is one kind's declared spec, as a Resource carries it (*FileSpec,
// *ContainerSpec, ...: Kinds lists them). Each kind is one file of this
// package (spec/<kind>.go) that registers it from init.
type Spec interface {
	// Kind is the name of the kind the spec is of (the JSON key it
	// travels under).
	Kind() string
	// Target is its identity within a node: a path, or a name.
	Target() string
	// Check refuses a spec that is not well formed, naming the field:
	// what both the controller and the host check.
	Check() error
	// Fill is a copy with fill applied to every string a ${setting} may
	// stand in, each named by its field as module.json writes it ("path",
	// `env["A"]`). Compose fills with the settings' values; the manifest's
	// reference check walks the same strings, so the two cannot drift.
	Fill(fill func(field, s string) (string, error)) (Spec, error)
	// Blobs are the contents it carries as blobs, fetched by digest.
	Blobs() []Blob
	// Row is how `mesh module show` lists it.
	Row() Row
}

// Blob is a content that travels apart from the declaration, by digest.
type Blob struct {
	Digest string
	Size   int64
}

// Row is how `mesh module show` lists a resource: "-" where its kind has
// nothing to say.
type Row struct {
	Target, Mode, Owner, Content string
}

// Kind describes one kind of resource. A kind is registered once, from
// init in spec/<kind>.go; the host registers its applier from
// host/<kind>.go and places it in the apply order in host/kinds.go.
type Kind struct {
	// Name is the kind's name: a resource's "kind", and the JSON key its
	// spec travels under, in a declaration and in module.json.
	Name string
	// Path says its target is a path on the machine. Kinds with paths
	// share one namespace on a node (a file and a directory may not both
	// be at /srv/x); any other is its own (container web).
	Path bool
	// Needs is the capability a node's host must report to hold the kind;
	// nil: none.
	Needs *Capability
	// New is a zero spec of the kind, to decode into.
	New func() Spec
	// Manifest reads the kind's spec as module.json writes it (raw: the
	// value under the kind's key), refusing unknown fields. Nil: the kind is
	// composed by the controller only (the node's network).
	Manifest func(raw []byte) (Declared, error)
}

// Declared is one resource as module.json writes it: the kind's spec with
// its defaults, and any source (a file beside module.json) named, not read.
type Declared interface {
	// Spec is the spec as declared, its sources not read: its target, and
	// the strings settings fill.
	Spec() Spec
	// Check refuses what is not well formed before settings fill it, each
	// error beginning with field (resources[i].KIND) and the field within.
	Check(field string) error
	// Resolve is the spec with its sources read by read.
	Resolve(field string, read func(source string) (Content, error)) (Spec, error)
}

// Capability is something a node's host reports it can hold, which some
// kinds need.
type Capability struct {
	// Name is how the host reports it.
	Name string
	// What it is, for messages: "container engine".
	What string
	// Hint says what to look at on a node without it.
	Hint string
}

// kinds are the registered kinds, by name.
var kinds = map[string]Kind{}

// Register adds a kind; each spec/<kind>.go calls it from init, and only
// from init (the registry is read without a lock). A kind without a name, a
// constructor or a spec of its own kind, or registered twice, is a
// programming error: Register panics.
func Register(k Kind) {
	switch {
	case k.Name == "" || strings.Trim(k.Name, "abcdefghijklmnopqrstuvwxyz") != "":
		panic(fmt.Sprintf("spec: kind name %q is not lowercase letters", k.Name))
	case k.Name == "name" || k.Name == "kind" || k.Name == "module":
		panic(fmt.Sprintf("spec: kind name %q is a resource's own field", k.Name))
	case k.New == nil || k.New() == nil || k.New().Kind() != k.Name:
		panic(fmt.Sprintf("spec: kind %q has no spec of its own kind", k.Name))
	}
	if _, dup := kinds[k.Name]; dup {
		panic(fmt.Sprintf("spec: kind %q registered twice", k.Name))
	}
	kinds[k.Name] = k
	wires.Store(nil)
}

// Kinds are the registered kinds, by name.
func Kinds() []Kind {
	out := make([]Kind, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Kind) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// KindNamed is the kind called name.
func KindNamed(name string) (Kind, bool) {
	k, ok := kinds[name]
	return k, ok
}

// kindByKey is the kind whose JSON key key is, matched as encoding/json
// matches a struct's field names (case aside).
func kindByKey(key string) (Kind, bool) {
	if k, ok := kinds[key]; ok {
		return k, true
	}
	for name, k := range kinds {
		if strings.EqualFold(name, key) {
			return k, true
		}
	}
	return Kind{}, false
}

// As is r's spec as T (*FileSpec, ...), if it is one.
func As[T Spec](r Resource) (T, bool) {
	s, ok := r.Spec.(T)
	return s, ok
}

// manifestKinds names the kinds module.json may declare, for messages:
// "container, directory and file".
func manifestKinds() string {
	var names []string
	for _, k := range Kinds() {
		if k.Manifest != nil {
			names = append(names, k.Name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// probe is s with each ${name} standing for a plain "x", as a value
// would fill it; s itself when it does not fill.
func probe(s string) string {
	refs := References(s)
	if len(refs) == 0 {
		return s
	}
	values := make(map[string]string, len(refs))
	for _, name := range refs {
		values[name] = "x"
	}
	filled, err := Fill(s, values)
	if err != nil {
		return s
	}
	return filled
}

// unfilled is s as settings will fill it, each ${setting} standing for a
// plain "x" (a mount whose source is all reference, "${dir}", is then not
// absolute, as it would not be once filled), and whether s holds any
// reference at all.
func unfilled(s Spec) (Spec, bool, error) {
	refs := false
	p, err := s.Fill(func(_, v string) (string, error) {
		x := probe(v)
		refs = refs || x != v
		return x, nil
	})
	return p, refs, err
}

// jsonNull says whether raw is the JSON null.
func jsonNull(raw json.RawMessage) bool { return string(raw) == "null" }
