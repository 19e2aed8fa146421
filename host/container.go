package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/mesh-fleet/mesh/spec"
)

// errNoEngine is the failure of every container and network resource on a
// host that was started without a container engine.
var errNoEngine = errors.New("this host has no container engine: start it with --docker (or DOCKER_HOST) naming one")

// stopTimeout is how long a container replaced or removed has to stop
// before it is killed.
const stopTimeout = 10

func init() {
	registerKind(hostKind{name: spec.KindContainer, applier: func(s *Services) Applier {
		return containerApplier{root: s.Root, blobs: s.Blobs, docker: s.Docker, node: s.Node, address: s.Address, overlay: s.Overlay, subnet: s.Subnet,
			running: &runningList{}, archives: &archiveIDs{}, spool: s.spool(), secrets: secretFiles{runtime: s.Runtime, seal: s.SealKey}}
	}})
}

// containerApplier holds containers in the engine, each named
// ContainerName(node, name) and labelled with its node, its resource and
// its identity digest. A container is replaced only when that digest
// differs; the roster never enters it (invariant 2).
type containerApplier struct {
	root string // the host's root: mount sources lie under it
	// spool is the directory an image archive is fetched into before the
	// engine loads it ("": the system's temporary directory).
	spool   string
	blobs   BlobFetcher
	docker  *Docker
	node    string
	address string       // the node's address, where ports are published
	subnet  netip.Prefix // the node's network; its gateway is the only DNS server
	// overlay is the node's overlay address while the overlay is on, where
	// ports are published then (nil or "": on address).
	overlay func() string
	// running is the node's running containers by name, listed once at the
	// start of an apply: a container running with the declared digest is
	// unchanged without an inspect of its own. Anything else is inspected.
	running *runningList
	// archives are the image IDs of the archives seen, by digest and
	// reference: an image the engine holds already is neither fetched nor
	// loaded again.
	archives *archiveIDs
	// secrets holds each container's secrets on a tmpfs of its own.
	secrets secretFiles
}

// runningList is one listing of the node's running containers.
type runningList struct {
	mu     sync.Mutex
	digest map[string]string // engine name to its digest label; nil: not listed
}

// prepare lists the node's running containers in one engine call, for the
// apply about to run, if it declares any. A listing that fails lists
// nothing: each container is then inspected, and fails there with the cause.
func (c containerApplier) prepare(ctx context.Context, resources []spec.Resource) {
	if c.docker == nil || c.running == nil || !slices.ContainsFunc(resources, func(r spec.Resource) bool { return r.Kind == spec.KindContainer }) {
		return
	}
	list, err := c.docker.cli.ContainerList(ctx, client.ContainerListOptions{
		Filters: make(client.Filters).Add("label", spec.LabelNode+"="+c.node).Add("status", "running"),
	})
	c.running.mu.Lock()
	defer c.running.mu.Unlock()
	c.running.digest = nil
	if err != nil {
		return
	}
	c.running.digest = map[string]string{}
	for _, ct := range list.Items {
		if ct.State != container.StateRunning || ct.Labels[spec.LabelNode] != c.node {
			continue
		}
		for _, n := range ct.Names {
			c.running.digest[strings.TrimPrefix(n, "/")] = ct.Labels[spec.LabelDigest]
		}
	}
}

// finish forgets the listing: it is good for one apply only.
func (c containerApplier) finish() {
	if c.running != nil {
		c.running.mu.Lock()
		c.running.digest = nil
		c.running.mu.Unlock()
	}
}

// listedUnchanged says whether the listing has name running with digest.
// A container that died lately is not taken from the listing, which may
// still have it running.
func (c containerApplier) listedUnchanged(name, digest string) bool {
	if c.running == nil || c.docker.diedRecently(name) {
		return false
	}
	c.running.mu.Lock()
	defer c.running.mu.Unlock()
	d, ok := c.running.digest[name]
	return ok && d == digest
}

// identity is everything a container is created from: the declared spec and
// what the host adds to it. Its digest is the container's identity. Of
// each secret it holds the keyed digest, never the value nor its sealed
// bytes (which a value sealed afresh changes).
type identity struct {
	Spec    spec.ContainerSpec `json:"spec"`
	Node    string             `json:"node"`
	Network string             `json:"network"`
	Address string             `json:"address"`
	// Publish is the node's overlay address, where a container that
	// publishes ports publishes them while the overlay is on; "" (and
	// left out, so a container's identity is the same as before the
	// overlay existed): on Address. It is the node's for its life: only
	// turning the overlay on or off changes it.
	Publish string   `json:"publish,omitempty"`
	DNS     string   `json:"dns"`
	Search  string   `json:"search"`
	Sources []string `json:"sources"` // mount sources as the machine sees them
}

func (c containerApplier) identity(root string, s spec.ContainerSpec) (identity, string) {
	if s.Secrets != nil {
		secrets := make([]spec.SecretMount, len(s.Secrets))
		for i, m := range s.Secrets {
			secrets[i] = spec.SecretMount{Setting: m.Setting, Target: m.Target, Digest: m.Digest}
		}
		s.Secrets = secrets
	}
	id := identity{Spec: s, Node: c.node, Network: spec.NetworkName(c.node), Address: c.address,
		DNS: Gateway(c.subnet).String(), Search: spec.Domain, Sources: []string{}}
	if len(s.Ports) > 0 && c.overlay != nil {
		id.Publish = c.overlay()
	}
	for _, m := range s.Mounts {
		id.Sources = append(id.Sources, filepath.Join(root, m.Source))
	}
	body, _ := json.Marshal(id)
	sum := sha256.Sum256(body)
	return id, "sha256:" + hex.EncodeToString(sum[:])
}

// found is what the engine holds under a container's name.
type found struct {
	outcome string // Created (nothing there), Changed (replace or start) or Unchanged
	replace bool   // its identity differs
	id      string
	state   *container.State
}

// read inspects the container named for s: what Apply would have to do.
// A container of that name that is not this node's is an error.
func (c containerApplier) read(ctx context.Context, name, digest string) (found, error) {
	if c.docker == nil {
		return found{}, errNoEngine
	}
	res, err := c.docker.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if notFound(err) {
		return found{outcome: spec.Created}, nil
	}
	if err != nil {
		return found{}, c.docker.wrap("inspect container "+name, err)
	}
	ct := res.Container
	var labels map[string]string
	if ct.Config != nil {
		labels = ct.Config.Labels
	}
	if owner := labels[spec.LabelNode]; owner != c.node {
		return found{}, fmt.Errorf("container %s exists and is not this node's (label %s=%q): remove or rename it (docker rm -f %s)", name, spec.LabelNode, owner, name)
	}
	f := found{outcome: spec.Unchanged, id: ct.ID, state: ct.State}
	switch {
	case labels[spec.LabelDigest] != digest:
		f.outcome, f.replace = spec.Changed, true
	case ct.State == nil || !(ct.State.Running || ct.State.Restarting):
		f.outcome = spec.Changed
	}
	return f, nil
}

// containerOf is r's container spec.
func containerOf(r spec.Resource) (*spec.ContainerSpec, error) {
	c, ok := spec.As[*spec.ContainerSpec](r)
	if !ok || c == nil {
		return nil, fmt.Errorf("resource %q has no container spec", r.Name)
	}
	return c, nil
}

// Plan says what Apply would do, changing nothing.
func (c containerApplier) Plan(ctx context.Context, r spec.Resource) (Result, error) {
	s, err := containerOf(r)
	if err != nil {
		return Result{}, err
	}
	if err := c.secrets.check(s); err != nil {
		return Result{}, err
	}
	_, digest := c.identity(c.root, *s)
	f, err := c.read(ctx, spec.ContainerName(c.node, s.Name), digest)
	return Result{Outcome: f.outcome}, err
}

// Apply creates the container if it is not there, replaces it if its
// identity differs, and starts it if it stopped, saying why it had
// stopped in the note. Its secrets are written to their tmpfs before it
// is created or started (a tmpfs is gone after the machine restarts).
func (c containerApplier) Apply(ctx context.Context, r spec.Resource, w *Writes) (Result, error) {
	cs, err := containerOf(r)
	if err != nil {
		return Result{}, err
	}
	s := *cs
	for _, m := range s.Mounts {
		if err := checkMountSource(c.root, m.Source); err != nil {
			return Result{}, err
		}
	}
	if err := c.secrets.check(&s); err != nil {
		return Result{}, err
	}
	name := spec.ContainerName(c.node, s.Name)
	id, digest := c.identity(c.root, s)
	if c.listedUnchanged(name, digest) {
		return Result{Outcome: spec.Unchanged}, nil
	}
	f, err := c.read(ctx, name, digest)
	if err != nil {
		return Result{}, err
	}
	switch {
	case f.outcome == spec.Unchanged:
		return Result{Outcome: spec.Unchanged}, nil
	case f.outcome == spec.Changed && !f.replace:
		if err := c.writeSecrets(name, &s, w); err != nil {
			return Result{}, err
		}
		w.add()
		if _, err := c.docker.cli.ContainerStart(ctx, f.id, client.ContainerStartOptions{}); err != nil {
			return Result{}, c.docker.wrap("start container "+name+" again", err)
		}
		return Result{Outcome: spec.Changed, Note: stoppedNote(f.state)}, nil
	}
	// Created or replaced: the image first, so a failure to get it leaves
	// the old container running.
	if err := c.image(ctx, s, w); err != nil {
		return Result{}, err
	}
	values, err := c.secrets.open(&s)
	if err != nil {
		return Result{}, err
	}
	if f.replace {
		if err := c.remove(ctx, f.id, name, w); err != nil {
			return Result{}, err
		}
	}
	if err := c.putSecrets(name, &s, values, w); err != nil {
		return Result{}, err
	}
	cfg, host, net, err := c.config(r, id, digest)
	if err != nil {
		return Result{}, err
	}
	w.add()
	created, err := c.docker.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name, Config: cfg, HostConfig: host, NetworkingConfig: net,
	})
	if err != nil {
		return Result{}, c.docker.wrap("create container "+name, err)
	}
	w.add()
	if _, err := c.docker.cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return Result{}, c.docker.wrap("start container "+name, err)
	}
	return Result{Outcome: f.outcome}, nil
}

// config is the engine's configuration of the container id describes.
func (c containerApplier) config(r spec.Resource, id identity, digest string) (*container.Config, *container.HostConfig, *network.NetworkingConfig, error) {
	s := id.Spec
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = v
	}
	labels[spec.LabelNode], labels[spec.LabelResource], labels[spec.LabelDigest] = c.node, r.Name, digest
	env := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	init := true
	cfg := &container.Config{Image: s.Image, Cmd: s.Command, Env: env, Labels: labels}
	host := &container.HostConfig{
		NetworkMode:   container.NetworkMode(id.Network),
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyMode(s.RestartPolicy())},
		DNS:           []netip.Addr{Gateway(c.subnet)},
		DNSSearch:     []string{spec.Domain},
		// The engine's init as PID 1 passes the stop signal on (a program
		// that is PID 1 itself ignores it, and is killed only after
		// stopTimeout) and reaps what the program leaves.
		Init: &init,
	}
	if len(s.Ports) > 0 {
		publish := c.address
		if id.Publish != "" {
			publish = id.Publish
		}
		addr, err := netip.ParseAddr(publish)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("container %s publishes ports, but the host keeps no address of the node to publish them on (%q): join it again with --address", s.Name, publish)
		}
		cfg.ExposedPorts = network.PortSet{}
		host.PortBindings = network.PortMap{}
		for _, p := range s.Ports {
			port, err := network.ParsePort(fmt.Sprintf("%d/%s", p.Container, p.Proto()))
			if err != nil {
				return nil, nil, nil, fmt.Errorf("container %s: port %d/%s: %w", s.Name, p.Container, p.Proto(), err)
			}
			cfg.ExposedPorts[port] = struct{}{}
			host.PortBindings[port] = append(host.PortBindings[port], network.PortBinding{HostIP: addr, HostPort: strconv.Itoa(int(p.Host))})
		}
	}
	for i, m := range s.Mounts {
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: id.Sources[i], Target: m.Target, ReadOnly: m.ReadOnly})
	}
	// Each secret is a file on the container's tmpfs, bound read-only:
	// what the engine shows is its path, never its value.
	name := spec.ContainerName(c.node, s.Name)
	for i, m := range s.Secrets {
		host.Mounts = append(host.Mounts, mount.Mount{Type: mount.TypeBind, Source: c.secrets.source(name, i, m), Target: m.Target, ReadOnly: true})
	}
	net := &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{id.Network: {}}}
	return cfg, host, net, nil
}

// image makes the engine hold s's image: from its archive when one is
// declared (the archive, not a tag that may be stale, is what was
// declared), loaded only when the engine holds no image of the archive's ID
// under s's reference; or else pulled when the engine lacks it.
func (c containerApplier) image(ctx context.Context, s spec.ContainerSpec, w *Writes) error {
	blobs := c.blobs
	if a := s.Archive; a != nil {
		key := a.Digest + " " + s.Image
		if id := c.archives.get(key); id != "" {
			if held, err := c.holds(ctx, s.Image, id); err != nil || held {
				return err
			}
		}
		if blobs == nil {
			return fmt.Errorf("image archive %s of container %s: no blob source", a.Digest, s.Name)
		}
		// The archive is spooled to a file, chunk by chunk, and read
		// from there for its image ID and by the engine's load: memory
		// holds a chunk, never the archive.
		spool, err := os.CreateTemp(c.spool, ".image-archive-*.tar")
		if err != nil {
			return fmt.Errorf("spool the image archive of container %s: %w", s.Name, err)
		}
		defer func() { spool.Close(); os.Remove(spool.Name()) }()
		if err := fetchBlob(ctx, blobs, a.Digest, a.Size, "the image archive of container "+s.Name, spool); err != nil {
			return err
		}
		if id := archiveImageID(spool, s.Image); id != "" {
			c.archives.put(key, id)
			if held, err := c.holds(ctx, s.Image, id); err != nil || held {
				return err
			}
		}
		if _, err := spool.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("read the spooled image archive of container %s: %w", s.Name, err)
		}
		w.add()
		res, err := c.docker.cli.ImageLoad(ctx, spool, client.ImageLoadWithQuiet(true))
		if err != nil {
			return c.docker.wrap(fmt.Sprintf("load image archive %s of container %s", a.Digest, s.Name), err)
		}
		err = drainMessages(res)
		res.Close()
		if err != nil {
			return fmt.Errorf("load image archive %s of container %s: %w", a.Digest, s.Name, err)
		}
		if _, err := c.docker.cli.ImageInspect(ctx, s.Image); err != nil {
			if notFound(err) {
				return fmt.Errorf("image archive %s of container %s holds no image %s", a.Digest, s.Name, s.Image)
			}
			return c.docker.wrap("inspect image "+s.Image, err)
		}
		return nil
	}
	_, err := c.docker.cli.ImageInspect(ctx, s.Image)
	if err == nil {
		return nil
	}
	if !notFound(err) {
		return c.docker.wrap("inspect image "+s.Image, err)
	}
	w.add()
	res, err := c.docker.cli.ImagePull(ctx, s.Image, client.ImagePullOptions{})
	if err != nil {
		return c.docker.wrap(fmt.Sprintf("pull image %s for container %s (no archive is declared)", s.Image, s.Name), err)
	}
	err = drainMessages(res)
	res.Close()
	if err != nil {
		return fmt.Errorf("pull image %s for container %s (no archive is declared): %w", s.Image, s.Name, err)
	}
	return nil
}

// holds says whether the engine has the image of ID id under ref.
func (c containerApplier) holds(ctx context.Context, ref, id string) (bool, error) {
	res, err := c.docker.cli.ImageInspect(ctx, ref)
	switch {
	case notFound(err):
		return false, nil
	case err != nil:
		return false, c.docker.wrap("inspect image "+ref, err)
	}
	return res.ID == id, nil
}

// writeSecrets opens s's secrets and writes them to the tmpfs of the
// container the engine calls name (a container with none has its tmpfs
// removed, if any is left).
func (c containerApplier) writeSecrets(name string, s *spec.ContainerSpec, w *Writes) error {
	values, err := c.secrets.open(s)
	if err != nil {
		return err
	}
	return c.putSecrets(name, s, values, w)
}

// putSecrets writes s's secrets (values, opened) to the tmpfs of the
// container the engine calls name; a container with none has its tmpfs
// removed, if any is left.
func (c containerApplier) putSecrets(name string, s *spec.ContainerSpec, values [][]byte, w *Writes) error {
	if len(s.Secrets) == 0 {
		return c.secrets.remove(name)
	}
	w.add()
	return c.secrets.write(name, s, values)
}

// remove stops a container (killing it after stopTimeout) and removes it,
// and then its secrets.
func (c containerApplier) remove(ctx context.Context, id, name string, w *Writes) error {
	c.docker.stopping(id)
	timeout := stopTimeout
	w.add()
	if _, err := c.docker.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout}); err != nil && !notFound(err) {
		return c.docker.wrap("stop container "+name, err)
	}
	w.add()
	if _, err := c.docker.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true}); err != nil && !notFound(err) {
		return c.docker.wrap("remove container "+name, err)
	}
	return c.secrets.remove(name)
}

// Remove removes the container a recorded; one already gone is removed.
func (c containerApplier) Remove(ctx context.Context, a Applied, _ []string, w *Writes) (Result, error) {
	removed := Result{Outcome: spec.Removed}
	name := spec.ContainerName(c.node, a.Path)
	f, err := c.read(ctx, name, "")
	if err != nil {
		return removed, err
	}
	if f.outcome == spec.Created { // nothing there, but maybe its secrets
		return removed, c.secrets.remove(name)
	}
	return removed, c.remove(ctx, f.id, name, w)
}

// stoppedNote says why a container that was started again had stopped.
func stoppedNote(st *container.State) string {
	if st == nil {
		return "started again"
	}
	var why string
	switch st.Status {
	case container.StateCreated:
		why = "it had never started"
	case container.StateExited:
		why = fmt.Sprintf("it had exited with code %d", st.ExitCode)
	default:
		why = fmt.Sprintf("it was %s (exit code %d)", st.Status, st.ExitCode)
	}
	if st.OOMKilled {
		why += ", out of memory"
	}
	if st.Error != "" {
		why += ": " + st.Error
	}
	if st.FinishedAt != "" && !strings.HasPrefix(st.FinishedAt, "0001-") && st.Status != container.StateCreated {
		why += " at " + st.FinishedAt
	}
	return "started again: " + why
}
