package spec

import (
	"fmt"
	"path"
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
	Resources   []ManifestResource `json:"resources"`
}

// ManifestResource is one resource in a manifest: exactly one of its fields.
type ManifestResource struct {
	File      *ManifestFileSpec      `json:"file,omitempty"`
	Directory *ManifestDirectorySpec `json:"directory,omitempty"`
	Container *ManifestContainerSpec `json:"container,omitempty"`
}

// ManifestContainerSpec is a container in a manifest: a ContainerSpec whose
// Archive, if any, is a file beside the manifest (an image archive made by
// docker save). Settings may fill its image, command, environment, mounts
// and labels.
type ManifestContainerSpec struct {
	Name    string            `json:"name"`
	Image   string            `json:"image"`
	Archive string            `json:"archive,omitempty"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Ports   []PortSpec        `json:"ports,omitempty"`
	Mounts  []MountSpec       `json:"mounts,omitempty"`
	Restart string            `json:"restart,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// spec is the container as declared, without its archive.
func (c ManifestContainerSpec) spec() ContainerSpec {
	return ContainerSpec{Name: c.Name, Image: c.Image, Command: c.Command, Env: c.Env,
		Ports: c.Ports, Mounts: c.Mounts, Restart: c.Restart, Labels: c.Labels}
}

// ManifestFileSpec is a file in a manifest: its content inline, or Source, a
// file beside the manifest. Mode defaults to 0644.
type ManifestFileSpec struct {
	Path    string  `json:"path"`
	Mode    *Mode   `json:"mode,omitempty"`
	Owner   string  `json:"owner,omitempty"`
	Group   string  `json:"group,omitempty"`
	Content *string `json:"content,omitempty"`
	Source  string  `json:"source,omitempty"`
}

// ManifestDirectorySpec is a directory in a manifest (DirectorySpec, whose
// fields it keeps in step). Mode defaults to 0755, OnRemove to keep.
type ManifestDirectorySpec struct {
	Path     string `json:"path"`
	Mode     *Mode  `json:"mode,omitempty"`
	Owner    string `json:"owner,omitempty"`
	Group    string `json:"group,omitempty"`
	OnRemove string `json:"on_remove,omitempty"`
}

// Module is a registered module: its manifest with every source read, as the
// CLI sends it and the controller keeps it. File content over InlineMax is a
// blob (Blob set, Content empty), uploaded before the module.
type Module struct {
	Name        string     `json:"name"`
	Version     string     `json:"version"`
	Description string     `json:"description,omitempty"`
	Settings    []Setting  `json:"settings,omitempty"`
	Routes      []Route    `json:"routes,omitempty"`
	Resources   []Resource `json:"resources"`
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
			if err := checkReferences(fmt.Sprintf("routes[%d].public[%d]", i, j), p, m.Settings); err != nil {
				return Manifest{}, err
			}
		}
	}
	seen := map[string]string{}
	for i, r := range m.Resources {
		field := fmt.Sprintf("resources[%d]", i)
		if err := checkResourceReferences(field, r, m.Settings); err != nil {
			return Manifest{}, err
		}
		var p string
		switch {
		case r.File != nil && r.Directory == nil && r.Container == nil:
			field += ".file"
			p = r.File.Path
			if m := r.File.Mode; m != nil {
				if err := m.CheckFile(); err != nil {
					return Manifest{}, fmt.Errorf("%s.mode: %w", field, err)
				}
			}
			hasContent, hasSource := r.File.Content != nil, r.File.Source != ""
			if hasContent == hasSource {
				return Manifest{}, fmt.Errorf("%s: give exactly one of content and source", field)
			}
			if hasSource {
				if s := r.File.Source; path.IsAbs(s) || path.Clean(s) != s || s == ".." || strings.HasPrefix(s, "../") {
					return Manifest{}, fmt.Errorf("%s.source: %q must be a clean path inside the module's directory", field, s)
				}
			}
		case r.Directory != nil && r.File == nil && r.Container == nil:
			field += ".directory"
			p = r.Directory.Path
			if err := CheckOnRemove(r.Directory.OnRemove); err != nil {
				return Manifest{}, fmt.Errorf("%s.on_remove: %w", field, err)
			}
		case r.Container != nil && r.File == nil && r.Directory == nil:
			field += ".container"
			c := r.Container
			if src := c.Archive; src != "" && !cleanSource(src) {
				return Manifest{}, fmt.Errorf("%s.archive: %q must be a clean path inside the module's directory", field, src)
			}
			if err := c.spec().checkUnfilled(); err != nil {
				return Manifest{}, fmt.Errorf("%s: %w", field, err)
			}
			if prev, dup := seen["container "+c.Name]; dup {
				return Manifest{}, fmt.Errorf("%s.name: container %q is also declared by %s", field, c.Name, prev)
			}
			seen["container "+c.Name] = field
			continue
		default:
			return Manifest{}, fmt.Errorf("%s: give exactly one of file, directory and container", field)
		}
		if err := CheckPath(p); err != nil {
			return Manifest{}, fmt.Errorf("%s.path: %w", field, err)
		}
		if prev, dup := seen[p]; dup {
			return Manifest{}, fmt.Errorf("%s.path: %s is also declared by %s", field, p, prev)
		}
		seen[p] = field
	}
	return m, nil
}

func checkResourceReferences(field string, r ManifestResource, settings []Setting) error {
	var fields map[string]string
	switch {
	case r.File != nil:
		fields = map[string]string{".file.path": r.File.Path, ".file.owner": r.File.Owner, ".file.group": r.File.Group}
		if r.File.Content != nil {
			fields[".file.content"] = *r.File.Content
		}
	case r.Directory != nil:
		fields = map[string]string{".directory.path": r.Directory.Path, ".directory.owner": r.Directory.Owner, ".directory.group": r.Directory.Group}
	case r.Container != nil:
		c := r.Container
		fields = map[string]string{".container.image": c.Image}
		for i, a := range c.Command {
			fields[fmt.Sprintf(".container.command[%d]", i)] = a
		}
		for k, v := range c.Env {
			fields[fmt.Sprintf(".container.env[%q]", k)] = v
		}
		for i, m := range c.Mounts {
			fields[fmt.Sprintf(".container.mounts[%d].source", i)] = m.Source
			fields[fmt.Sprintf(".container.mounts[%d].target", i)] = m.Target
		}
		for k, v := range c.Labels {
			fields[fmt.Sprintf(".container.labels[%q]", k)] = v
		}
	}
	for f, v := range fields {
		if err := checkReferences(field+f, v, settings); err != nil {
			return err
		}
	}
	return nil
}

// Resolve turns a manifest into a module, reading each source with read.
func (m Manifest) Resolve(read func(source string) ([]byte, error)) (Module, error) {
	mod := Module{Name: m.Name, Version: m.Version, Description: m.Description, Settings: m.Settings, Routes: m.Routes, Resources: []Resource{}}
	for i, r := range m.Resources {
		switch {
		case r.File != nil:
			f := r.File
			var content []byte
			if f.Content != nil {
				content = []byte(*f.Content)
			} else {
				b, err := read(f.Source)
				if err != nil {
					return Module{}, fmt.Errorf("resources[%d].file.source: %w", i, err)
				}
				content = b
			}
			spec := &FileSpec{Path: f.Path, Mode: 0o644, Owner: f.Owner, Group: f.Group,
				Size: int64(len(content)), Digest: ContentDigest(content)}
			if f.Mode != nil {
				spec.Mode = *f.Mode
			}
			if len(content) > InlineMax {
				spec.Blob = true
			} else {
				spec.Content = content
			}
			mod.Resources = append(mod.Resources, Resource{Name: ResourceName(m.Name, KindFile, f.Path), Kind: KindFile, Module: m.Name, File: spec})
		case r.Directory != nil:
			d := r.Directory
			spec := &DirectorySpec{Path: d.Path, Mode: 0o755, Owner: d.Owner, Group: d.Group}
			if d.Mode != nil {
				spec.Mode = *d.Mode
			}
			if d.OnRemove == OnRemoveDelete {
				spec.OnRemove = d.OnRemove // keep, the default, is left out: one spelling, one digest
			}
			mod.Resources = append(mod.Resources, Resource{Name: ResourceName(m.Name, KindDirectory, d.Path), Kind: KindDirectory, Module: m.Name, Directory: spec})
		case r.Container != nil:
			c := r.Container.spec()
			if src := r.Container.Archive; src != "" {
				b, err := read(src)
				if err != nil {
					return Module{}, fmt.Errorf("resources[%d].container.archive: %w", i, err)
				}
				if len(b) == 0 {
					return Module{}, fmt.Errorf("resources[%d].container.archive: %s is empty", i, src)
				}
				c.Archive = &ImageArchive{Size: int64(len(b)), Digest: ContentDigest(b)}
			}
			mod.Resources = append(mod.Resources, Resource{Name: ResourceName(m.Name, KindContainer, c.Name), Kind: KindContainer, Module: m.Name, Container: &c})
		}
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
	}
	seen := map[string]bool{}
	for _, r := range m.Resources {
		err := r.Check()
		if r.Kind == KindContainer && r.Container != nil && err == nil {
			err = r.Container.checkUnfilled()
		}
		if err != nil {
			return fmt.Errorf("module %q: %w", m.Name, err)
		}
		if r.Module != m.Name || r.Name != ResourceName(m.Name, r.Kind, r.Target()) {
			return fmt.Errorf("module %q: resource %q is misnamed", m.Name, r.Name)
		}
		if seen[r.Target()] {
			return fmt.Errorf("module %q: %s is declared twice", m.Name, r.Target())
		}
		seen[r.Target()] = true
	}
	return nil
}

// Blobs are the digests and sizes of the module's contents that travel as blobs.
func (m Module) Blobs() map[string]int64 {
	b := map[string]int64{}
	for _, r := range m.Resources {
		if r.File != nil && r.File.Blob {
			b[r.File.Digest] = r.File.Size
		}
		if r.Container != nil && r.Container.Archive != nil {
			b[r.Container.Archive.Digest] = r.Container.Archive.Size
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
	AssignRequest struct {
		Module   string            `json:"module"`
		Node     string            `json:"node"`
		Settings map[string]string `json:"settings,omitempty"`
	}
	// AssignResult is what an assignment or unassignment changed, recorded:
	// the nodes whose declaration it alters (each needs a push; every node
	// when the mesh's names change), sorted, out of how many nodes the mesh
	// has.
	AssignResult struct {
		Changed []string `json:"changed"`
		Nodes   int      `json:"nodes"`
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
	}
	PushResult struct {
		ID    string     `json:"id"`
		Nodes []PushNode `json:"nodes"`
	}
	// PushNode is what a push did for one node: sent with a sequence, or not
	// sent and why.
	PushNode struct {
		Node      string `json:"node"`
		Seq       uint64 `json:"seq,omitempty"`
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
