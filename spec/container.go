package spec

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// KindContainer is a container in the node's container engine.
const KindContainer = "container"

func init() {
	Register(Kind{Name: KindContainer, Needs: &ContainerEngine,
		New: func() Spec { return &ContainerSpec{} },
		Manifest: func(raw []byte) (Declared, error) {
			m := &containerManifest{}
			return m, Decode(raw, m)
		}})
}

// CapContainers is the capability a host reports while a container engine
// answers it. Composing a container for a node without it fails.
const CapContainers = "containers"

// ContainerEngine is what a node needs to hold containers and its network.
var ContainerEngine = Capability{Name: CapContainers, What: "container engine", Hint: "is Docker running there?"}

// ContainerName is the engine's name of node's container called name. Hosts
// sharing one engine (as in tests) each touch only their own.
func ContainerName(node, name string) string { return node + "-" + name }

// Labels a host puts on what it creates in the engine.
const (
	// LabelNode names the node that owns a container or network.
	LabelNode = "mesh.node"
	// LabelResource is the declared resource's name.
	LabelResource = "mesh.resource"
	// LabelDigest is the container's identity: the digest of its declared
	// spec as the host creates it. A container is replaced only when it
	// differs.
	LabelDigest = "mesh.digest"
)

// ContainerSpec is one container, as declared. The roster never enters it:
// a container finds the mesh's names through its machine's resolver, so a
// roster change leaves its identity alone (invariant 2).
type ContainerSpec struct {
	// Name is the container's name within its node; the engine's name is
	// ContainerName(node, Name).
	Name  string `json:"name"`
	Image string `json:"image"`
	// Archive is an image archive (docker save) that travels as a blob and
	// is loaded when the engine lacks Image; without it, Image is pulled.
	Archive *ImageArchive     `json:"archive,omitempty"`
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Ports are published on the node's address only.
	Ports  []PortSpec  `json:"ports,omitempty"`
	Mounts []MountSpec `json:"mounts,omitempty"`
	// Restart is the engine's restart policy: no, always, unless-stopped
	// (the default) or on-failure.
	Restart string            `json:"restart,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Secrets are secret settings handed to the container as files.
	Secrets []SecretMount `json:"secrets,omitempty"`
}

// SecretMount hands a secret setting's value to a container as a file on a
// tmpfs, bound read-only at Target (the Swarm convention): the value never
// enters the container's environment nor what docker inspect shows, and
// never lies on the node's disk.
type SecretMount struct {
	Setting string `json:"setting"`
	Target  string `json:"target"`
	// Value is the setting's value, filled in by compose and sealed by the
	// controller (Sealed): it never travels.
	Value string `json:"-"`
	// Sealed is the value sealed to the node's sealing key and Digest its
	// keyed digest (SealedDigestPrefix), both filled in by the controller.
	// The digest enters the container's identity, so a changed value
	// replaces the container; the value never does.
	Sealed string `json:"sealed,omitempty"`
	Digest string `json:"digest,omitempty"`
}

// ImageArchive is an image archive's blob.
type ImageArchive struct {
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// PortSpec publishes a container's port on the node's address.
type PortSpec struct {
	Container uint16 `json:"container"`
	Host      uint16 `json:"host"`
	Protocol  string `json:"protocol,omitempty"` // tcp (default) or udp
}

// MountSpec binds a directory or file of the machine into the container.
type MountSpec struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Restart policies.
var restartPolicies = []string{"no", "always", "unless-stopped", "on-failure"}

// Check refuses a container spec that is not well formed, naming the field.
func (c *ContainerSpec) Check() error {
	if err := CheckName("container", c.Name); err != nil {
		return err
	}
	if strings.TrimSpace(c.Image) == "" || strings.ContainsAny(c.Image, " \t\n") {
		return fmt.Errorf("container %q: image %q is empty or holds spaces", c.Name, c.Image)
	}
	if a := c.Archive; a != nil && (!strings.HasPrefix(a.Digest, "sha256:") || len(a.Digest) != 71 || a.Size <= 0) {
		return fmt.Errorf("container %q: archive digest %q is not sha256:HEX of a non-empty archive", c.Name, a.Digest)
	}
	for k := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("container %q: environment variable name %q is empty or holds '=' or NUL", c.Name, k)
		}
	}
	seen := map[string]bool{}
	for i, p := range c.Ports {
		if p.Container == 0 || p.Host == 0 {
			return fmt.Errorf("container %q: ports[%d]: container and host ports must be 1 to 65535", c.Name, i)
		}
		if p.Protocol != "" && p.Protocol != "tcp" && p.Protocol != "udp" {
			return fmt.Errorf("container %q: ports[%d]: protocol %q is not tcp or udp", c.Name, i, p.Protocol)
		}
		key := fmt.Sprintf("%d/%s", p.Host, p.Proto())
		if seen[key] {
			return fmt.Errorf("container %q: host port %s is published twice", c.Name, key)
		}
		seen[key] = true
	}
	for i, m := range c.Mounts {
		if err := CheckPath(m.Source); err != nil {
			return fmt.Errorf("container %q: mounts[%d].source: %w", c.Name, i, err)
		}
		if err := CheckPath(m.Target); err != nil {
			return fmt.Errorf("container %q: mounts[%d].target: %w", c.Name, i, err)
		}
	}
	if c.Restart != "" && !slices.Contains(restartPolicies, c.Restart) {
		return fmt.Errorf("container %q: restart %q is not one of %s", c.Name, c.Restart, strings.Join(restartPolicies, ", "))
	}
	for k := range c.Labels {
		if strings.HasPrefix(k, "mesh.") {
			return fmt.Errorf("container %q: label %q: labels under mesh. are the host's own", c.Name, k)
		}
	}
	return c.checkSecrets()
}

// checkSecrets refuses a secret mount that is not well formed: a setting
// name that is none, a target that is not absolute and clean or that
// another secret or mount takes, and a sealed value without its keyed
// digest, or a digest without it.
func (c *ContainerSpec) checkSecrets() error {
	targets := map[string]bool{}
	for _, m := range c.Mounts {
		targets[m.Target] = true
	}
	for i, m := range c.Secrets {
		if !settingName.MatchString(m.Setting) {
			return fmt.Errorf("container %q: secrets[%d].setting: %q is not a setting's name", c.Name, i, m.Setting)
		}
		if err := CheckPath(m.Target); err != nil {
			return fmt.Errorf("container %q: secrets[%d].target: %w", c.Name, i, err)
		}
		if targets[m.Target] {
			return fmt.Errorf("container %q: secrets[%d].target: %s is also the target of another secret or mount", c.Name, i, m.Target)
		}
		targets[m.Target] = true
		switch {
		case (m.Sealed == "") != (m.Digest == ""):
			return fmt.Errorf("container %q: secrets[%d]: a sealed value comes with its digest, and a digest with its sealed value", c.Name, i)
		case m.Digest != "" && (!strings.HasPrefix(m.Digest, SealedDigestPrefix) || len(m.Digest) != len(SealedDigestPrefix)+64):
			return fmt.Errorf("container %q: secrets[%d]: digest is not %sHEX", c.Name, i, SealedDigestPrefix)
		}
	}
	return nil
}

// checkSecretSettings refuses a secret mount whose setting the module does
// not declare, or declares not secret (its value goes in env).
func (c *ContainerSpec) checkSecretSettings(field string, settings []Setting) error {
	for i, m := range c.Secrets {
		found := false
		for _, st := range settings {
			if st.Name != m.Setting {
				continue
			}
			if !st.Secret {
				return fmt.Errorf("%s.secrets[%d].setting: %q is not a secret setting: give its value in env", field, i, m.Setting)
			}
			found = true
		}
		if !found {
			return fmt.Errorf("%s.secrets[%d].setting: %q names no setting of the module", field, i, m.Setting)
		}
	}
	return nil
}

// Proto is the port's protocol, tcp when not given.
func (p PortSpec) Proto() string {
	if p.Protocol == "" {
		return "tcp"
	}
	return p.Protocol
}

// RestartPolicy is the declared policy, unless-stopped when not given.
func (c *ContainerSpec) RestartPolicy() string {
	if c.Restart == "" {
		return "unless-stopped"
	}
	return c.Restart
}

// Kind is KindContainer.
func (*ContainerSpec) Kind() string { return KindContainer }

// Target is the container's name within its node.
func (c *ContainerSpec) Target() string { return c.Name }

// Fill fills the image, each command argument, each environment and label
// value, each mount's source and target, and each secret's target (its
// value is compose's to fill). What is nil stays nil.
func (c *ContainerSpec) Fill(fill func(field, s string) (string, error)) (Spec, error) {
	f := *c
	var err error
	if f.Image, err = fill("image", c.Image); err != nil {
		return nil, err
	}
	if c.Command != nil {
		f.Command = make([]string, len(c.Command))
		for i, a := range c.Command {
			if f.Command[i], err = fill(fmt.Sprintf("command[%d]", i), a); err != nil {
				return nil, err
			}
		}
	}
	if f.Env, err = fillValues("env", c.Env, fill); err != nil {
		return nil, err
	}
	if f.Labels, err = fillValues("labels", c.Labels, fill); err != nil {
		return nil, err
	}
	if c.Mounts != nil {
		f.Mounts = make([]MountSpec, len(c.Mounts))
		for i, m := range c.Mounts {
			if m.Source, err = fill(fmt.Sprintf("mounts[%d].source", i), m.Source); err != nil {
				return nil, err
			}
			if m.Target, err = fill(fmt.Sprintf("mounts[%d].target", i), m.Target); err != nil {
				return nil, err
			}
			f.Mounts[i] = m
		}
	}
	if c.Secrets != nil {
		f.Secrets = make([]SecretMount, len(c.Secrets))
		for i, m := range c.Secrets {
			if m.Target, err = fill(fmt.Sprintf("secrets[%d].target", i), m.Target); err != nil {
				return nil, err
			}
			f.Secrets[i] = m
		}
	}
	return &f, nil
}

// fillValues fills each value of m, in the order of its keys; nil stays
// nil.
func fillValues(field string, m map[string]string, fill func(field, s string) (string, error)) (map[string]string, error) {
	if m == nil {
		return nil, nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(m))
	for _, k := range keys {
		v, err := fill(fmt.Sprintf("%s[%q]", field, k), m[k])
		if err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, nil
}

// Blobs is the image archive, if one is declared.
func (c *ContainerSpec) Blobs() []Blob {
	if c.Archive == nil {
		return nil
	}
	return []Blob{{Digest: c.Archive.Digest, Size: c.Archive.Size}}
}

// Row lists the container: its image, and its archive.
func (c *ContainerSpec) Row() Row {
	image := c.Image
	if a := c.Archive; a != nil {
		image += fmt.Sprintf(" (archive %d bytes %s)", a.Size, a.Digest[:min(19, len(a.Digest))])
	}
	return Row{Target: c.Name, Mode: "-", Owner: "-", Content: image}
}

// containerManifest is a container in module.json: the ContainerSpec, its
// Archive, if any, a file beside the manifest (an image archive made by
// docker save), and its secrets, each a setting and a target.
type containerManifest struct {
	ContainerSpec
	Archive string                `json:"archive,omitempty"`
	Secrets []secretMountManifest `json:"secrets,omitempty"`
}

// secretMountManifest is a secret mount in module.json: its setting and
// target. The sealed value and its digest are the controller's to fill.
type secretMountManifest struct {
	Setting string           `json:"setting"`
	Target  string           `json:"target"`
	Sealed  controllerFilled `json:"sealed"`
	Digest  controllerFilled `json:"digest"`
}

// controllerFilled is a field of a secret mount that module.json does not
// give: the controller fills it from the setting's value.
type controllerFilled struct{}

// UnmarshalJSON refuses the field.
func (*controllerFilled) UnmarshalJSON([]byte) error {
	return errors.New("a secret's sealed and digest are not written in module.json: the controller fills them from the setting's value")
}

// spec is the container as declared, without its archive.
func (m *containerManifest) spec() ContainerSpec {
	c := m.ContainerSpec
	c.Secrets = nil
	for _, s := range m.Secrets {
		c.Secrets = append(c.Secrets, SecretMount{Setting: s.Setting, Target: s.Target})
	}
	return c
}

// Spec is the container as declared, without its archive.
func (m *containerManifest) Spec() Spec { c := m.spec(); return &c }

// checkSettings refuses a secret whose setting the module does not
// declare, or declares not secret.
func (m *containerManifest) checkSettings(field string, settings []Setting) error {
	c := m.spec()
	return c.checkSecretSettings(field, settings)
}

// Check refuses an archive outside the module's directory, and a container
// that would not be well formed once settings fill it.
func (m *containerManifest) Check(field string) error {
	if src := m.Archive; src != "" && !cleanSource(src) {
		return fmt.Errorf("%s.archive: %q must be a clean path inside the module's directory", field, src)
	}
	p, _, err := unfilled(m.Spec())
	if err == nil {
		err = p.Check()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// Resolve reads the archive, if any, which travels as a blob.
func (m *containerManifest) Resolve(field string, read func(source string) (Content, error)) (Spec, error) {
	c := m.spec()
	if src := m.Archive; src != "" {
		b, err := read(src)
		if err != nil {
			return nil, fmt.Errorf("%s.archive: %w", field, err)
		}
		if b.Size == 0 {
			return nil, fmt.Errorf("%s.archive: %s is empty", field, src)
		}
		c.Archive = &ImageArchive{Size: b.Size, Digest: b.Digest}
	}
	return &c, nil
}
