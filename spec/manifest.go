package spec

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// ManifestFile is the name of a module's manifest in its directory.
const ManifestFile = "module.json"

// Manifest is a module's module.json, as the operator writes it.
type Manifest struct {
	Name        string             `json:"name"`
	Version     string             `json:"version"`
	Description string             `json:"description,omitempty"`
	Settings    []Setting          `json:"settings,omitempty"`
	Routes      []Route            `json:"routes,omitempty"`
	Provides    []Provide          `json:"provides,omitempty"`
	Consumes    []Consume          `json:"consumes,omitempty"`
	Resources   []ManifestResource `json:"resources"`
}

// ManifestResource is one resource of a manifest, {"KIND": {...}}: one
// key, a kind's name, and the kind's spec as module.json writes it.
// ParseManifest reads it.
type ManifestResource struct {
	Kind     string
	Declared Declared
	keys     []string          // as decoded: each key of the object,
	raws     []json.RawMessage // and its value, null left out
}

// UnmarshalJSON keeps the object's keys and values for ParseManifest,
// which names the resource in what it refuses.
func (r *ManifestResource) UnmarshalJSON(b []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	*r = ManifestResource{}
	for k, v := range fields {
		if !jsonNull(v) {
			r.keys = append(r.keys, k)
		}
	}
	slices.Sort(r.keys)
	for _, k := range r.keys {
		r.raws = append(r.raws, fields[k])
	}
	return nil
}

// read finds the resource's kind and reads its spec, refusing anything
// else, each error beginning with field.
func (r *ManifestResource) read(field string) (Kind, string, error) {
	var kind Kind
	var raw []byte
	for i, key := range r.keys {
		k, ok := kindByKey(key)
		if !ok || k.Manifest == nil {
			return Kind{}, "", fmt.Errorf("%s: json: unknown field %q: give one of %s", field, key, manifestKinds())
		}
		if kind.Name != "" {
			return Kind{}, "", fmt.Errorf("%s: give exactly one of %s", field, manifestKinds())
		}
		kind, raw = k, r.raws[i]
	}
	if kind.Name == "" {
		return Kind{}, "", fmt.Errorf("%s: give exactly one of %s", field, manifestKinds())
	}
	field += "." + kind.Name
	d, err := kind.Manifest(raw)
	if err != nil {
		return Kind{}, "", fmt.Errorf("%s: %w", field, err)
	}
	r.Kind, r.Declared = kind.Name, d
	return kind, field, nil
}

// Module is a registered module: its manifest with every source read, as the
// CLI sends it and the controller keeps it. File content over InlineMax is a
// blob (Blob set, Content empty), uploaded before the module.
type Module struct {
	Name        string    `json:"name"`
	Version     string    `json:"version"`
	Description string    `json:"description,omitempty"`
	Settings    []Setting `json:"settings,omitempty"`
	Routes      []Route   `json:"routes,omitempty"`
	// Provides are the grants the module provides (docs/modules.md,
	// Grants), Consumes those it consumes.
	Provides  []Provide `json:"provides,omitempty"`
	Consumes  []Consume `json:"consumes,omitempty"`
	Resources Resources `json:"resources"`
}

// Setting returns the module's setting called name.
func (m Module) Setting(name string) (Setting, bool) {
	for _, s := range m.Settings {
		if s.Name == name {
			return s, true
		}
	}
	return Setting{}, false
}

// cleanSource says whether s is a clean relative path inside a module's
// directory.
func cleanSource(s string) bool {
	return s != "" && !path.IsAbs(s) && path.Clean(s) == s && s != ".." && !strings.HasPrefix(s, "../")
}

// checkReferences refuses a ${name} that names neither a setting of the
// module nor node or version.
func checkReferences(field, s string, settings []Setting) error {
	for _, name := range References(s) {
		if name == "node" || name == "version" {
			continue
		}
		found := false
		for _, st := range settings {
			found = found || st.Name == name
		}
		if !found {
			return fmt.Errorf("%s: ${%s} names no setting of the module (nor node or version)", field, name)
		}
	}
	return nil
}

// UsesSecret says whether s names a secret setting.
func UsesSecret(s string, settings []Setting) bool {
	for _, name := range References(s) {
		for _, st := range settings {
			if st.Name == name && st.Secret {
				return true
			}
		}
	}
	return false
}

// checkSecretUse refuses a secret setting anywhere but a file's content,
// which travels sealed to its node (a container's secrets name their
// setting, and never reach here): elsewhere (a path, a container's
// environment or command, a public name) the value would be shown in the
// clear, by docker inspect or by any listing.
func checkSecretUse(field, kind, f, s string, settings []Setting) error {
	for _, name := range References(s) {
		for _, st := range settings {
			if st.Name != name || !st.Secret {
				continue
			}
			if kind == KindContainer && strings.HasPrefix(f, "env[") {
				return fmt.Errorf(`%s: ${%s} is a secret setting, and a container's environment is shown by docker inspect: hand it to the container as a file with "secrets": [{"setting": %q, "target": "/run/secrets/%s"}], and point the image at it with its _FILE variable (e.g. %s_FILE=/run/secrets/%s)`,
					field, name, name, name, strings.ToUpper(name), name)
			}
			return fmt.Errorf("%s: ${%s} is a secret setting: a secret may be used only in a file's content or a container's secrets, each sealed to the node", field, name)
		}
	}
	return nil
}

// secretField refuses a secret setting in field f of a resource of kind
// (checkSecretUse) unless f is a file's content; it says whether that
// content holds one, which makes it sealed to its node.
func secretField(field, kind, f, s string, settings []Setting) (content bool, err error) {
	if kind == KindFile && f == "content" {
		return UsesSecret(s, settings), nil
	}
	return false, checkSecretUse(field+"."+f, kind, f, s, settings)
}

// checkSecretFields refuses a secret setting in any field of s, a
// resource of kind, but a file's content (secretField).
func checkSecretFields(field, kind string, s Spec, settings []Setting) error {
	_, err := s.Fill(func(f, v string) (string, error) {
		_, err := secretField(field, kind, f, v, settings)
		return v, err
	})
	return err
}

// ParseManifest reads a module.json, refusing unknown fields and anything
// not well formed, naming the field.
func ParseManifest(data []byte) (Manifest, error) {
	var m Manifest
	if err := Decode(data, &m); err != nil {
		return Manifest{}, err
	}
	if err := CheckName("module", m.Name); err != nil {
		return Manifest{}, fmt.Errorf("name: %w", err)
	}
	if strings.TrimSpace(m.Version) == "" || strings.ContainsAny(m.Version, " \t\n") {
		return Manifest{}, fmt.Errorf("version: %q is empty or holds spaces", m.Version)
	}
	settings := map[string]bool{}
	for i, st := range m.Settings {
		if err := st.Check(); err != nil {
			return Manifest{}, fmt.Errorf("settings[%d]: %w", i, err)
		}
		if settings[st.Name] {
			return Manifest{}, fmt.Errorf("settings[%d]: setting %q is declared twice", i, st.Name)
		}
		settings[st.Name] = true
	}
	routes := map[string]bool{}
	for i, r := range m.Routes {
		if err := r.Check(); err != nil {
			return Manifest{}, fmt.Errorf("routes[%d]: %w", i, err)
		}
		if routes[r.Name] {
			return Manifest{}, fmt.Errorf("routes[%d]: route %q is declared twice", i, r.Name)
		}
		routes[r.Name] = true
		for j, p := range r.Public {
			field := fmt.Sprintf("routes[%d].public[%d]", i, j)
			if err := checkReferences(field, p, m.Settings); err != nil {
				return Manifest{}, err
			}
			if err := checkSecretUse(field, "", "", p, m.Settings); err != nil {
				return Manifest{}, err
			}
		}
	}
	if err := checkGrants(m.Settings, m.Routes, m.Provides, m.Consumes); err != nil {
		return Manifest{}, err
	}
	seen := map[string]string{}
	for i := range m.Resources {
		r := &m.Resources[i]
		kind, field, err := r.read(fmt.Sprintf("resources[%d]", i))
		if err != nil {
			return Manifest{}, err
		}
		declared := r.Declared.Spec()
		secret := false // a secret setting reaches the file's content
		if _, err := declared.Fill(func(f, s string) (string, error) {
			if err := checkReferences(field+"."+f, s, m.Settings); err != nil {
				return s, err
			}
			content, err := secretField(field, kind.Name, f, s, m.Settings)
			secret = secret || content
			return s, err
		}); err != nil {
			return Manifest{}, err
		}
		if sc, ok := r.Declared.(interface{ secretContent() }); ok && secret {
			sc.secretContent()
		}
		if cs, ok := r.Declared.(interface {
			checkSettings(field string, settings []Setting) error
		}); ok {
			if err := cs.checkSettings(field, m.Settings); err != nil {
				return Manifest{}, err
			}
		}
		if err := r.Declared.Check(field); err != nil {
			return Manifest{}, err
		}
		key := Resource{Kind: kind.Name, Spec: declared}.Key()
		if prev, dup := seen[key]; dup {
			if kind.Path {
				return Manifest{}, fmt.Errorf("%s.path: %s is also declared by %s", field, key, prev)
			}
			return Manifest{}, fmt.Errorf("%s.name: %s is also declared by %s", field, key, prev)
		}
		seen[key] = field
	}
	declared := make([]Resource, len(m.Resources))
	for i, r := range m.Resources {
		declared[i] = Resource{Kind: r.Kind, Spec: r.Declared.Spec()}
	}
	if err := checkOnChange(m.Name, declared, m.Provides); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Resolve turns a manifest into a module, reading each source with read.
func (m Manifest) Resolve(read func(source string) (Content, error)) (Module, error) {
	mod := Module{Name: m.Name, Version: m.Version, Description: m.Description, Settings: m.Settings, Routes: m.Routes,
		Provides: m.Provides, Consumes: m.Consumes, Resources: []Resource{}}
	for i, r := range m.Resources {
		field := fmt.Sprintf("resources[%d]", i)
		if r.Declared == nil {
			var err error
			if _, field, err = r.read(field); err != nil {
				return Module{}, err
			}
		} else {
			field += "." + r.Kind
		}
		s, err := r.Declared.Resolve(field, read)
		if err != nil {
			return Module{}, err
		}
		mod.Resources = append(mod.Resources, Resource{Name: ResourceName(m.Name, r.Kind, s.Target()), Kind: r.Kind, Module: m.Name, Spec: s})
	}
	return mod, nil
}

// Check refuses a module that is not well formed (what the controller checks
// of what a CLI sent).
func (m Module) Check() error {
	if err := CheckName("module", m.Name); err != nil {
		return err
	}
	if strings.TrimSpace(m.Version) == "" {
		return fmt.Errorf("module %q: no version", m.Name)
	}
	for _, st := range m.Settings {
		if err := st.Check(); err != nil {
			return fmt.Errorf("module %q: %w", m.Name, err)
		}
	}
	for _, rt := range m.Routes {
		if err := rt.Check(); err != nil {
			return fmt.Errorf("module %q: %w", m.Name, err)
		}
		for j, p := range rt.Public {
			if err := checkSecretUse(fmt.Sprintf("route %s.public[%d]", rt.Name, j), "", "", p, m.Settings); err != nil {
				return fmt.Errorf("module %q: %w", m.Name, err)
			}
		}
	}
	if err := checkGrants(m.Settings, m.Routes, m.Provides, m.Consumes); err != nil {
		return fmt.Errorf("module %q: %w", m.Name, err)
	}
	seen := map[string]bool{}
	for _, r := range m.Resources {
		err := r.Check()
		if err == nil {
			// Checked as it is, and as settings will fill it when it
			// holds references.
			if p, refs, perr := unfilled(r.Spec); perr != nil {
				err = perr
			} else if refs {
				err = p.Check()
			}
		}
		if c, ok := r.Spec.(*ContainerSpec); ok && err == nil {
			err = c.checkSecretSettings("resource "+r.Name, m.Settings)
		}
		// A secret setting only where it travels sealed: the controller
		// refuses what a CLI's ParseManifest would have, whoever sent it.
		if err == nil {
			err = checkSecretFields("resource "+r.Name, r.Kind, r.Spec, m.Settings)
		}
		if err != nil {
			return fmt.Errorf("module %q: %w", m.Name, err)
		}
		if r.Module != m.Name || r.Name != ResourceName(m.Name, r.Kind, r.Target()) {
			return fmt.Errorf("module %q: resource %q is misnamed", m.Name, r.Name)
		}
		key := r.Key()
		if seen[key] {
			return fmt.Errorf("module %q: %s is declared twice", m.Name, key)
		}
		seen[key] = true
	}
	return checkOnChange(m.Name, m.Resources, m.Provides)
}

// Blobs are the digests and sizes of the module's contents that travel as blobs.
func (m Module) Blobs() map[string]int64 {
	b := map[string]int64{}
	for _, r := range m.Resources {
		if r.Spec == nil {
			continue
		}
		for _, blob := range r.Spec.Blobs() {
			b[blob.Digest] = blob.Size
		}
	}
	return b
}

// API requests and results for modules, assignments, blobs and pushes.
type (
	ModuleRegisterRequest struct {
		Modules []Module `json:"modules"`
	}
	ModuleRegisterResult struct {
		Modules []ModuleInfo `json:"modules"`
	}
	ModuleInfo struct {
		Name        string    `json:"name"`
		Version     string    `json:"version"`
		Description string    `json:"description,omitempty"`
		Resources   int       `json:"resources"`
		Registered  time.Time `json:"registered"`
		Previous    string    `json:"previous_version,omitempty"`
		Nodes       []string  `json:"nodes"`
	}
	ModuleListRequest struct{}
	ModuleListResult  struct {
		Modules []ModuleInfo `json:"modules"`
	}
	ModuleShowRequest struct {
		Name string `json:"name"`
	}
	ModuleShowResult struct {
		Info   ModuleInfo `json:"info"`
		Module Module     `json:"module"`
	}
	// ModuleRemoveRequest removes the module called Name from the
	// catalogue; refused while it is assigned.
	ModuleRemoveRequest struct {
		Name string `json:"name"`
	}
	// ModuleRemoveResult is the module removed, as it was.
	ModuleRemoveResult struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	AssignRequest struct {
		Module   string            `json:"module"`
		Node     string            `json:"node"`
		Settings map[string]string `json:"settings,omitempty"`
		// Unset, in an assign, names settings to drop: a setting neither
		// given nor unset keeps the value it has on the node.
		Unset []string `json:"unset,omitempty"`
		// Grants names, for a grant the module consumes, the node whose
		// provider it is given (grant to node): needed only when several
		// nodes provide it.
		Grants map[string]string `json:"grants,omitempty"`
		// Force, in an unassign, removes a provider whose consumers still
		// hold its grant: they keep their last credential, orphaned.
		Force bool `json:"force,omitempty"`
	}
	// AssignResult is what an assignment or unassignment changed, recorded:
	// the nodes whose declaration it alters (each needs a push; every node
	// when the mesh's names change), sorted, out of how many nodes the mesh
	// has.
	AssignResult struct {
		Changed []string `json:"changed"`
		Nodes   int      `json:"nodes"`
		// Roster says that the change alters the names every node serves:
		// the next push sends them to every node, in one roster message.
		Roster bool `json:"roster,omitempty"`
		// Unknown says why Changed could not be worked out (then any node
		// may need the push); the change is recorded all the same.
		Unknown string `json:"unknown,omitempty"`
	}
	BlobPutRequest struct {
		Digest string `json:"digest"`
		Size   int64  `json:"size"`
		Offset int64  `json:"offset"`
		Data   []byte `json:"data"`
	}
	BlobPutResult struct {
		Complete bool `json:"complete"`
	}
	PushRequest struct {
		Nodes []string `json:"nodes"`
		// DryRun asks each node what it would change: nothing is stored,
		// acked or applied.
		DryRun bool `json:"dry_run,omitempty"`
		// Progress is the subject (under the operator's inbox) the
		// controller sends each node's report to as it arrives.
		Progress string `json:"progress"`
		// Force sends a new declaration to a node whose last one holds
		// the same content (a host whose state was lost).
		Force bool `json:"force,omitempty"`
	}
	PushResult struct {
		ID    string     `json:"id"`
		Nodes []PushNode `json:"nodes"`
		// Roster is the roster message this push sent every host; nil when
		// the names had not changed (none was sent).
		Roster *PushRoster `json:"roster,omitempty"`
	}
	// PushRoster is the roster message a push sent: its sequence, and how
	// many nodes it names (every host takes it).
	PushRoster struct {
		Seq   uint64 `json:"seq"`
		Nodes int    `json:"nodes"`
	}
	// PushNode is what a push did for one node: sent with a sequence, not
	// sent because its last declaration (Seq) already holds what would be
	// sent (Unchanged), or not sent and why.
	PushNode struct {
		Node      string `json:"node"`
		Seq       uint64 `json:"seq,omitempty"`
		Unchanged bool   `json:"unchanged,omitempty"`
		Resources int    `json:"resources"`
		Held      bool   `json:"held,omitempty"`
		Error     string `json:"error,omitempty"`
	}
	// PushEvent is one node's report, forwarded to a push's progress subject.
	PushEvent struct {
		PushID string `json:"push_id"`
		Report Report `json:"report"`
	}
)
