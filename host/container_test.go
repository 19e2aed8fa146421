package host_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/dockertest"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/spec"
)

// engineRig is an apply engine for one test node whose containers and
// network live in the real Docker engine, and a client to look at them.
type engineRig struct {
	t      *testing.T
	cli    *client.Client
	docker *host.Docker
	engine *host.Engine
	node   string
	subnet netip.Prefix
	root   string
	blobs  *fakeBlobs
	image  string
}

// shared is the image the tests that do not touch images run, built the
// first time one asks, under a tag of the run's own; TestMain removes it.
// A build and a removal per test cost the engine, which every container
// test waits on, more than the tests' own calls.
var shared struct {
	once  sync.Once
	tag   string
	err   error
	built atomic.Bool
}

// sharedImage is the shared image's tag, built if need be.
func sharedImage(t *testing.T, cli *client.Client) string {
	t.Helper()
	shared.once.Do(func() {
		shared.tag = fmt.Sprintf("mesh-test/host-%d:1", os.Getpid())
		if shared.err = dockertest.BuildImage(cli, shared.tag, map[string]string{"/www/index.html": "hello from the image\n"}); shared.err == nil {
			shared.built.Store(true)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.tag
}

// removeSharedImage removes the shared image, if a test built it.
func removeSharedImage() error {
	if !shared.built.Load() {
		return nil
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return err
	}
	defer cli.Close()
	return dockertest.RemoveImage(cli, shared.tag)
}

// hostSubnets is where the host's tests make their nodes' networks, one
// /24 each (dockertest.Subnet).
var hostSubnets = netip.MustParsePrefix("10.214.0.0/16")

// newEngineRig is an engine for a node of its own, on a subnet of its own,
// running the image the tests share (busybox httpd serving /www);
// everything the node made in the engine is removed when the test ends.
func newEngineRig(t *testing.T) *engineRig { return startEngineRig(t, false) }

// newEngineRigOwnImage is newEngineRig with an image of the node's own
// (the node's name in it makes its ID unique), for a test that removes
// its image or counts its loads: it touches no other test's.
func newEngineRigOwnImage(t *testing.T) *engineRig { return startEngineRig(t, true) }

func startEngineRig(t *testing.T, ownImage bool) *engineRig {
	cli := dockertest.Client(t)
	var b [4]byte
	rand.Read(b[:])
	r := &engineRig{t: t, cli: cli, node: "ct" + hex.EncodeToString(b[:]), root: t.TempDir(),
		blobs: &fakeBlobs{blobs: map[string][]byte{}}}
	// Host tests take 10.214.0.0/16 (the e2e tests another), one /24 each,
	// held until the node's network is gone (cleanups run last first).
	r.subnet = dockertest.Subnet(t, cli, hostSubnets)
	if ownImage {
		// Removed after the node's containers (cleanups run last first).
		r.image = "mesh-test/ct-" + r.node + ":1"
		dockertest.Build(t, cli, r.image, map[string]string{"/www/index.html": "hello from the image\n", "/etc/mesh-test-node": r.node + "\n"})
	} else {
		r.image = sharedImage(t, cli)
	}
	d, err := host.NewDocker("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	r.docker = d
	r.engine = host.NewEngine(host.Services{Root: r.root, Blobs: r.blobs, Docker: d, Node: r.node, Address: "127.0.0.1", Subnet: r.subnet})
	t.Cleanup(func() { dockertest.RemoveNode(cli, r.node) })
	return r
}

func (r *engineRig) network() spec.Resource {
	name := spec.NetworkName(r.node)
	return spec.Resource{Name: spec.ResourceName(spec.NetworkModule, spec.KindNetwork, name), Kind: spec.KindNetwork,
		Module: spec.NetworkModule, Spec: &spec.NetworkSpec{Name: name}}
}

func (r *engineRig) container(c spec.ContainerSpec) spec.Resource {
	if c.Image == "" {
		c.Image = r.image
	}
	return spec.Resource{Name: spec.ResourceName("m", spec.KindContainer, c.Name), Kind: spec.KindContainer, Module: "m", Spec: &c}
}

// inspect is the engine's view of the node's container called name; ok is
// false when there is none.
func (r *engineRig) inspect(name string) (client.ContainerInspectResult, bool) {
	r.t.Helper()
	res, err := r.cli.ContainerInspect(context.Background(), spec.ContainerName(r.node, name), client.ContainerInspectOptions{})
	if err != nil {
		if strings.Contains(err.Error(), "No such container") {
			return res, false
		}
		r.t.Fatalf("inspect %s: %v", name, err)
	}
	return res, true
}

// waitStopped waits until the container is not running.
func (r *engineRig) waitStopped(name string) {
	r.t.Helper()
	poll.Until(r.t, 30*time.Second, "container "+name+" stopped", func() error {
		res, ok := r.inspect(name)
		if !ok {
			return errors.New("no such container")
		}
		if !res.Container.State.Running && !res.Container.State.Restarting {
			return nil
		}
		return errors.New("state " + string(res.Container.State.Status))
	})
}

func httpd(name string) spec.ContainerSpec {
	return spec.ContainerSpec{Name: name, Command: []string{"/bin/httpd", "-f", "-p", "8080", "-h", "/www"}}
}

// TestContainerIdentity is invariants 2 and 3 for containers: created once
// with the host's resolver as the only DNS server, unchanged (no mutating
// engine call) when nothing declared changed, replaced only when its own
// spec changed, started again when it stopped, and removed when no longer
// declared, the network after it.
func TestContainerIdentity(t *testing.T) {
	t.Parallel()
	r := newEngineRig(t)
	ctx := context.Background()
	web := httpd("web")
	web.Env = map[string]string{"GREETING": "hello"}
	other := httpd("other")
	other.Restart = "no" // the engine does not start it again by itself
	declared := []spec.Resource{r.network(), r.container(web), r.container(other)}

	// A dry run first: what it would make, making nothing.
	before := r.docker.Mutations()
	checkOutcomes(t, r.engine.Preview(context.Background(), declared, nil), allOutcome(declared, spec.Created))
	if got := r.docker.Mutations() - before; got != 0 {
		t.Errorf("a preview made %d mutating engine calls", got)
	}

	results, record, writes := r.engine.Apply(ctx, declared, nil)
	checkOutcomes(t, results, allOutcome(declared, spec.Created))
	if writes == 0 {
		t.Error("a first apply counted no writes")
	}
	first, ok := r.inspect("web")
	if !ok {
		t.Fatal("container web was not created")
	}
	ct := first.Container
	gateway := host.Gateway(r.subnet)
	if !ct.State.Running {
		t.Errorf("container web is %s, not running", ct.State.Status)
	}
	if got := ct.HostConfig.DNS; len(got) != 1 || got[0] != gateway {
		t.Errorf("container web's DNS servers are %v, want only the gateway %s", got, gateway)
	}
	if got := ct.HostConfig.DNSSearch; len(got) != 1 || got[0] != spec.Domain {
		t.Errorf("container web's search domains are %v, want [%s]", got, spec.Domain)
	}
	if ct.Config.Labels[spec.LabelNode] != r.node || ct.Config.Labels[spec.LabelDigest] == "" {
		t.Errorf("container web's labels are %v", ct.Config.Labels)
	}
	if string(ct.HostConfig.NetworkMode) != spec.NetworkName(r.node) {
		t.Errorf("container web is on network %s", ct.HostConfig.NetworkMode)
	}
	otherID := func() string {
		res, ok := r.inspect("other")
		if !ok {
			t.Fatal("container other is gone")
		}
		return res.Container.ID
	}
	otherFirst := otherID()

	// The same declaration again: nothing changes, and the engine is only
	// read; a dry run says so too.
	checkOutcomes(t, r.engine.Preview(context.Background(), declared, record), allOutcome(declared, spec.Unchanged))
	before = r.docker.Mutations()
	results, record, writes = r.engine.Apply(ctx, declared, record)
	checkOutcomes(t, results, allOutcome(declared, spec.Unchanged))
	if got := r.docker.Mutations() - before; got != 0 || writes != 0 {
		t.Errorf("the same declaration again made %d mutating engine calls and counted %d writes, want none", got, writes)
	}

	// An environment change replaces exactly that container.
	web.Env = map[string]string{"GREETING": "hi"}
	declared = []spec.Resource{r.network(), r.container(web), r.container(other)}
	checkOutcomes(t, r.engine.Preview(context.Background(), declared, record), map[string]string{declared[0].Name: spec.Unchanged, declared[1].Name: spec.Changed, declared[2].Name: spec.Unchanged})
	results, record, _ = r.engine.Apply(ctx, declared, record)
	checkOutcomes(t, results, map[string]string{declared[0].Name: spec.Unchanged, declared[1].Name: spec.Changed, declared[2].Name: spec.Unchanged})
	second, _ := r.inspect("web")
	if second.Container.ID == ct.ID {
		t.Error("an environment change kept container web's ID: it was not replaced")
	}
	if !contains(second.Container.Config.Env, "GREETING=hi") {
		t.Errorf("container web's environment is %v", second.Container.Config.Env)
	}
	if otherID() != otherFirst {
		t.Error("container other was replaced for a change to web")
	}

	// Killed by hand: started again, and said so.
	if _, err := r.cli.ContainerKill(ctx, otherFirst, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	r.waitStopped("other")
	results, record, _ = r.engine.Apply(ctx, declared, record)
	res := resultOf(t, results, declared[2].Name)
	if res.Outcome != spec.Changed || !strings.Contains(res.Note, "started again") || !strings.Contains(res.Note, "137") {
		t.Errorf("a killed container's result is %+v, want changed with a note that it was started again after exit code 137", res)
	}
	if got, _ := r.inspect("other"); !got.Container.State.Running || got.Container.ID != otherFirst {
		t.Errorf("container other after reconcile: running %v, same ID %v", got.Container.State.Running, got.Container.ID == otherFirst)
	}

	// Removal: the containers, then the network.
	results, record, _ = r.engine.Apply(ctx, nil, record)
	checkOutcomes(t, results, allOutcome(declared, spec.Removed))
	if len(record) != 0 {
		t.Errorf("record after removal: %+v", record)
	}
	if _, ok := r.inspect("web"); ok {
		t.Error("container web is still there after removal")
	}
	if _, err := r.cli.NetworkInspect(ctx, spec.NetworkName(r.node), client.NetworkInspectOptions{}); err == nil {
		t.Error("the network is still there after removal")
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestContainerPublishesOnTheNodeAddress: a port is published on the node's
// address only, and serves the container's page there.
func TestContainerPublishesOnTheNodeAddress(t *testing.T) {
	t.Parallel()
	r := newEngineRig(t)
	ctx := context.Background()
	// A port the test holds (testport): one the kernel chose and let go
	// may be another process's by the time the engine publishes on it.
	port := testport.Port(t)
	web := httpd("web")
	web.Ports = []spec.PortSpec{{Container: 8080, Host: uint16(port)}}
	declared := []spec.Resource{r.network(), r.container(web)}
	results, _, _ := r.engine.Apply(ctx, declared, nil)
	checkOutcomes(t, results, allOutcome(declared, spec.Created))
	got, _ := r.inspect("web")
	for p, bindings := range got.Container.HostConfig.PortBindings {
		for _, b := range bindings {
			if b.HostIP.String() != "127.0.0.1" {
				t.Errorf("port %v is published on %v, not the node's address", p, b.HostIP)
			}
		}
	}
	body := fetch(t, fmt.Sprintf("http://127.0.0.1:%d/", port))
	if body != "hello from the image\n" {
		t.Errorf("the published port served %q", body)
	}
}

// fetch GETs url, retrying while the server comes up.
func fetch(t *testing.T, url string) string {
	t.Helper()
	var body string
	poll.Until(t, 20*time.Second, "an answer from "+url, func() error {
		conn, err := net.DialTimeout("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"), time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET / HTTP/1.0\r\n\r\n")
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		var ok bool
		if _, body, ok = strings.Cut(b.String(), "\r\n\r\n"); !ok {
			return fmt.Errorf("no HTTP answer: %q", b.String())
		}
		return nil
	})
	return body
}

// TestContainerImageFromArchive: an image the engine lacks is loaded from
// the archive that travels as a blob, and a container runs from it.
func TestContainerImageFromArchive(t *testing.T) {
	t.Parallel()
	r := newEngineRigOwnImage(t)
	ctx := context.Background()
	archive := filepath.Join(t.TempDir(), "image.tar")
	dockertest.Save(t, r.cli, r.image, archive)
	dockertest.Remove(t, r.cli, r.image)
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	r.blobs.blobs[spec.ContentDigest(data)] = data
	web := httpd("web")
	web.Archive = &spec.ImageArchive{Size: int64(len(data)), Digest: spec.ContentDigest(data)}
	declared := []spec.Resource{r.network(), r.container(web)}
	results, _, _ := r.engine.Apply(ctx, declared, nil)
	checkOutcomes(t, results, allOutcome(declared, spec.Created))
	if got, ok := r.inspect("web"); !ok || !got.Container.State.Running {
		t.Fatal("the container from the loaded archive is not running")
	}

	// An archive that does not hold the declared image says so.
	bad := httpd("bad")
	bad.Image = "mesh-test/not-in-the-archive:1"
	bad.Archive = web.Archive
	declared = append(declared, r.container(bad))
	results, _, _ = r.engine.Apply(ctx, declared, nil)
	if res := resultOf(t, results, declared[2].Name); res.Outcome != spec.Failed || !strings.Contains(res.Error, "holds no image mesh-test/not-in-the-archive:1") {
		t.Errorf("a container whose archive lacks its image: %+v", res)
	}
}

// TestContainerNotThisNodes: a container of the name that this node did
// not make is neither replaced nor removed.
func TestContainerNotThisNodes(t *testing.T) {
	t.Parallel()
	r := newEngineRig(t)
	ctx := context.Background()
	name := spec.ContainerName(r.node, "web")
	made, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: name, Image: r.image,
		Config: &container.Config{Cmd: []string{"/bin/sleep", "1000"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.cli.ContainerRemove(context.Background(), made.ID, client.ContainerRemoveOptions{Force: true})
	})
	declared := []spec.Resource{r.network(), r.container(httpd("web"))}
	results, record, _ := r.engine.Apply(ctx, declared, nil)
	if res := resultOf(t, results, declared[1].Name); res.Outcome != spec.Failed || !strings.Contains(res.Error, "is not this node's") {
		t.Errorf("someone else's container: %+v", res)
	}
	r.engine.Apply(ctx, nil, record)
	if got, ok := r.inspect("web"); !ok || got.Container.ID != made.ID {
		t.Error("someone else's container was replaced or removed")
	}
}

// TestContainersFailAloneWithoutEngine: with the engine not answering, the
// container and network resources fail with that cause, and the files and
// directories still apply.
func TestContainersFailAloneWithoutEngine(t *testing.T) {
	t.Parallel()
	endpoint := dockertest.DeadEngine(t)
	sock := strings.TrimPrefix(endpoint, "unix://")
	d, err := host.NewDocker(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	e := host.NewEngine(host.Services{Root: root, Blobs: &fakeBlobs{}, Docker: d, Node: "alpha", Address: "127.0.0.1", Subnet: netip.MustParsePrefix("10.214.0.0/24")})
	network := spec.Resource{Name: "mesh:network:mesh-alpha", Kind: spec.KindNetwork, Module: "mesh", Spec: &spec.NetworkSpec{Name: "mesh-alpha"}}
	ctr := spec.Resource{Name: "m:container:web", Kind: spec.KindContainer, Module: "m", Spec: &spec.ContainerSpec{Name: "web", Image: "x:1"}}
	declared := []spec.Resource{dirDecl("/srv/web", 0o755), fileDecl("/srv/web/index.html", 0o644, "hi\n"), network, ctr}
	results, _, _ := e.Apply(context.Background(), declared, nil)
	for _, res := range results {
		switch res.Kind {
		case spec.KindFile, spec.KindDirectory:
			if res.Outcome != spec.Created {
				t.Errorf("%s: %s %s, want created", res.Name, res.Outcome, res.Error)
			}
		default:
			if res.Outcome != spec.Failed || !strings.Contains(res.Error, "does not answer") || !strings.Contains(res.Error, sock) {
				t.Errorf("%s: %s %q, want failed naming the engine that does not answer", res.Name, res.Outcome, res.Error)
			}
		}
	}
	checkContent(t, filepath.Join(root, "srv/web/index.html"), "hi\n")
}
