package spec

import (
	"fmt"
	"slices"
	"strings"
)

// Kinds of resource that a container engine holds.
const (
	KindNetwork   = "network"
	KindContainer = "container"
)

// CapContainers is the capability a host reports while a container engine
// answers it. Composing a container for a node without it fails.
const CapContainers = "containers"

// NetworkModule is the module name the node's own network is declared
// under: it belongs to the node, not to any module.
const NetworkModule = "mesh"

// NetworkName is the name of node's own container network, a bridge on its
// machine whose gateway is where its resolver also listens.
func NetworkName(node string) string { return "mesh-" + node }

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

// NetworkSpec is the node's own bridge network. Its subnet is the host's
// choice (mesh host --subnet), as its address is.
type NetworkSpec struct {
	Name string `json:"name"`
}

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

// Check refuses a network spec that is not well formed.
func (n NetworkSpec) Check() error {
	if !strings.HasPrefix(n.Name, "mesh-") {
		return fmt.Errorf("network name %q is not mesh-NODE", n.Name)
	}
	return CheckName("network", strings.TrimPrefix(n.Name, "mesh-"))
}

// Check refuses a container spec that is not well formed, naming the field.
func (c ContainerSpec) Check() error {
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
	return nil
}

// checkUnfilled checks a manifest's container before settings fill it:
// each ${setting} stands for a plain "x", so a mount whose source is all
// reference ("${dir}") is refused as not absolute, as it would be filled.
func (c ContainerSpec) checkUnfilled() error {
	x := func(s string) string {
		values := map[string]string{}
		for _, name := range References(s) {
			values[name] = "x"
		}
		filled, err := Fill(s, values)
		if err != nil {
			return s
		}
		return filled
	}
	probe := c
	probe.Image = x(c.Image)
	probe.Mounts = make([]MountSpec, len(c.Mounts))
	for i, m := range c.Mounts {
		probe.Mounts[i] = MountSpec{Source: x(m.Source), Target: x(m.Target), ReadOnly: m.ReadOnly}
	}
	return probe.Check()
}

// Proto is the port's protocol, tcp when not given.
func (p PortSpec) Proto() string {
	if p.Protocol == "" {
		return "tcp"
	}
	return p.Protocol
}

// RestartPolicy is the declared policy, unless-stopped when not given.
func (c ContainerSpec) RestartPolicy() string {
	if c.Restart == "" {
		return "unless-stopped"
	}
	return c.Restart
}
