package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/dockertest"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/moby/moby/client"
)

// containerMesh is a mesh of two nodes, alpha and beta, whose hosts run
// containers in the machine's Docker engine: each on an address of its own
// on the loopback interface and a container network of its own.
// A container mesh's nodes, networks and addresses are its own, so that
// tests using the Docker engine run in parallel: the engine names a node's
// containers <node>-<name> and its network mesh-<node>, and two networks
// cannot share a subnet. Slot k (handed out in order, from 1) is nodes
// alpha<k> and beta<k> on subnets 10.215.2k.0/24 and 10.215.2k+1.0/24, at
// addresses 10.216.k.1 and 10.216.k.2 on the loopback interface. The same
// slot always names the same subnet, so what a killed run left holding a
// subnet is removed by name before the slot is used again. The host's
// package tests take other subnets.
var slots atomic.Int32

// dockerSlot is a slot of the test's own.
func dockerSlot(t testing.TB) int {
	k := int(slots.Add(1))
	if 2*k+1 > 255 {
		t.Fatalf("docker slot %d: no subnet left in 10.215.0.0/16", k)
	}
	return k
}

// containerMesh is a mesh of two nodes, alpha<k> (a) and beta<k> (b),
// whose hosts run containers in the machine's Docker engine: each on an
// address of its own on the loopback interface and a container network of
// its own.
type containerMesh struct {
	*testMesh
	cli                  *client.Client
	a, b                 string // the nodes' names
	betaDir              string
	beta                 *daemon
	rootA, rootB         string
	addrA, addrB         string
	subnetA, subnetB     netip.Prefix
	webDir, clientModDir string
}

// loopbackAddress puts addr on the loopback interface until the test ends:
// an address of the machine that containers reach through their bridge.
func loopbackAddress(t testing.TB, addr string) {
	t.Helper()
	// One a killed run left behind serves as well: iproute2 says "File
	// exists" or (6.1 here) "Address already assigned".
	if out, err := exec.Command("ip", "addr", "add", addr+"/32", "dev", "lo").CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") && !strings.Contains(string(out), "Address already assigned") {
		t.Fatalf("ip addr add %s dev lo (the container tests run as root): %v: %s", addr, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "addr", "del", addr+"/32", "dev", "lo").Run() })
}

// sharedImage is the image every container test's modules run: busybox
// and meshtls (examples/meshtls, built static) FROM scratch, as the
// examples' Dockerfiles make it, with its archive.
// It is built once in a run, the first time a test asks, under a tag of
// the run's own; TestMain removes it. Sharing it spares the engine a build
// and a save per test (a host finds the image there already and loads
// nothing).
var sharedImage struct {
	once         sync.Once
	tag, archive string
	err          error
	built        atomic.Bool
}

// image is the shared image's tag and archive, built if need be.
func image(t testing.TB, cli *client.Client) (tag, archive string) {
	t.Helper()
	sharedImage.once.Do(func() {
		sharedImage.tag = fmt.Sprintf("mesh-test/e2e-%d:1", os.Getpid())
		sharedImage.archive = filepath.Join(binDir, "image.tar")
		var meshtls []byte
		if meshtls, sharedImage.err = buildMeshtls(); sharedImage.err != nil {
			return
		}
		if sharedImage.err = dockertest.BuildImage(cli, sharedImage.tag, map[string]string{"/bin/meshtls": string(meshtls)}); sharedImage.err != nil {
			return
		}
		sharedImage.built.Store(true)
		sharedImage.err = dockertest.SaveImage(cli, sharedImage.tag, sharedImage.archive)
	})
	if sharedImage.err != nil {
		t.Fatal(sharedImage.err)
	}
	return sharedImage.tag, sharedImage.archive
}

// buildMeshtls is examples/meshtls built static and stripped, as make
// example-images builds it for the examples' images: the archive every
// host of a test fetches is a third smaller than unstripped.
func buildMeshtls() ([]byte, error) {
	out := filepath.Join(binDir, "meshtls")
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "../examples/meshtls")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build meshtls for the tests' image: %v: %s", err, msg)
	}
	return os.ReadFile(out)
}

// removeSharedImage removes the shared image, if a test built it.
func removeSharedImage() {
	if !sharedImage.built.Load() {
		return
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "remove the tests' image:", err)
		return
	}
	defer cli.Close()
	if err := dockertest.RemoveImage(cli, sharedImage.tag); err != nil {
		fmt.Fprintln(os.Stderr, "remove the tests' image:", err)
	}
}

// exampleModule copies examples/NAME into a directory of the test's, its
// image the shared one, with its archive beside the manifest as the
// module names it.
func exampleModule(t *testing.T, cli *client.Client, name string) string {
	t.Helper()
	tag, archive := image(t, cli)
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join(example(name), "module.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.ReplaceAll(string(body), "mesh-example/"+name+":1", tag)
	if err := os.WriteFile(filepath.Join(dir, "module.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(archive, filepath.Join(dir, name+".tar")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// newContainerMesh starts a (genesis, reconciling every second unless
// alphaFlags say otherwise: a later flag wins) and b, and waits for both to
// report a container engine.
func newContainerMesh(t *testing.T, alphaFlags ...string) *containerMesh {
	return startContainerMesh(t, true, alphaFlags...)
}

// newContainerNode is newContainerMesh with a alone: no b, and no client
// module.
func newContainerNode(t *testing.T, alphaFlags ...string) *containerMesh {
	return startContainerMesh(t, false, alphaFlags...)
}

func startContainerMesh(t *testing.T, withBeta bool, alphaFlags ...string) *containerMesh {
	cli := dockertest.Client(t)
	unmountAtEnd(t)
	k := dockerSlot(t)
	m := &containerMesh{cli: cli, a: fmt.Sprintf("alpha%d", k), b: fmt.Sprintf("beta%d", k), rootA: t.TempDir(), rootB: t.TempDir(),
		addrA: fmt.Sprintf("10.216.%d.1", k), addrB: fmt.Sprintf("10.216.%d.2", k),
		subnetA: netip.MustParsePrefix(fmt.Sprintf("10.215.%d.0/24", 2*k)),
		subnetB: netip.MustParsePrefix(fmt.Sprintf("10.215.%d.0/24", 2*k+1)),
	}
	nodes := []string{m.a}
	if withBeta {
		nodes = append(nodes, m.b)
	}
	loopbackAddress(t, m.addrA)
	m.webDir = exampleModule(t, cli, "web")
	if withBeta {
		loopbackAddress(t, m.addrB)
		m.clientModDir = exampleModule(t, cli, "client")
	}
	// Removed after the hosts stop (cleanups run last first), before the
	// images go.
	for _, node := range nodes {
		dockertest.RemoveNode(cli, node)
		t.Cleanup(func() { dockertest.RemoveNode(cli, node) })
	}

	engine := cli.DaemonHost()
	m.testMesh = newMesh(t, append([]string{"--node", m.a, "--docker", engine, "--root", m.rootA, "--address", m.addrA, "--subnet", m.subnetA.String(), "--reconcile", "1s"}, alphaFlags...)...)
	if withBeta {
		m.betaDir, m.beta = join(t, m.token(t, m.b), "--docker", engine, "--root", m.rootB, "--address", m.addrB, "--subnet", m.subnetB.String())
	}
	poll.Until(t, 30*time.Second, "every host reports a container engine", func() error {
		var have []string
		for _, n := range nodeList(t, m.dir) {
			if n.Facts != nil && slices.Contains(n.Facts.Capabilities, spec.CapContainers) {
				have = append(have, n.Name)
			}
		}
		if len(have) == len(nodes) {
			return nil
		}
		return fmt.Errorf("with the containers capability: %v", have)
	})
	return m
}

// unmountAtEnd unmounts, when the test ends, what is still mounted in its
// temporary directories: the tmpfs a host mounts for a container's
// secrets stays while the container runs, and the hosts stop before the
// test's containers are removed. It runs after the hosts stop and before
// the directories are removed (it is registered after the first TempDir,
// whose removal runs last, and before the hosts start).
func unmountAtEnd(t *testing.T) {
	t.Helper()
	base := filepath.Dir(t.TempDir()) + "/"
	t.Cleanup(func() {
		info, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(info), "\n") {
			// The fifth field is the mount point; none of a test's holds a space.
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], base) {
				if err := syscall.Unmount(f[4], syscall.MNT_DETACH); err != nil {
					t.Errorf("unmount %s: %v", f[4], err)
				}
			}
		}
	})
}

// container is the engine's view of node's container name; ok is false when
// there is none.
func (m *containerMesh) container(t *testing.T, node, name string) (client.ContainerInspectResult, bool) {
	t.Helper()
	res, err := m.cli.ContainerInspect(context.Background(), spec.ContainerName(node, name), client.ContainerInspectOptions{})
	if err != nil {
		if strings.Contains(err.Error(), "No such container") {
			return res, false
		}
		t.Fatal(err)
	}
	return res, true
}

func (m *containerMesh) id(t *testing.T, node, name string) string {
	t.Helper()
	res, ok := m.container(t, node, name)
	if !ok {
		t.Fatalf("container %s of %s is not there", name, node)
	}
	return res.Container.ID
}

// lifecycle is the lifecycle events of a's and b's containers and
// networks between since and now.
func (m *containerMesh) lifecycle(t *testing.T, since time.Time) []string {
	t.Helper()
	return engineEvents(t, m.cli, since, m.a, m.b)
}

// engineEvents is the lifecycle events of nodes' containers and networks
// between since and now, "TYPE ACTION NAME" each; a network's events name
// the container joining or leaving it by its ID.
func engineEvents(t testing.TB, cli *client.Client, since time.Time, nodes ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := cli.Events(ctx, client.EventsListOptions{
		Since: strconv.FormatInt(since.Unix()-1, 10),
		Until: strconv.FormatInt(time.Now().Unix()+1, 10),
	})
	var got []string
	for {
		select {
		case msg, ok := <-res.Messages:
			if !ok {
				return got
			}
			if msg.TimeNano < since.UnixNano() {
				continue
			}
			attrs := msg.Actor.Attributes
			node, name := attrs[spec.LabelNode], attrs["name"]
			if msg.Type == "network" {
				// A container joining or leaving: named by its ID.
				node, name = strings.TrimPrefix(attrs["name"], "mesh-"), attrs["container"]
			}
			if !slices.Contains(nodes, node) {
				continue
			}
			switch string(msg.Action) {
			case "create", "destroy", "restart", "start", "stop", "die", "kill", "connect", "disconnect", "rename", "update":
				got = append(got, fmt.Sprintf("%s %s %s", msg.Type, msg.Action, name))
			}
		case err := <-res.Err:
			if err != nil && !errors.Is(err, io.EOF) && ctx.Err() == nil {
				t.Fatalf("docker events: %v", err)
			}
			return got
		}
	}
}

// engineProxy passes connections on a socket of the test's to the machine's
// engine, until stopped: an engine that can be stopped and started again
// without touching the one every other test uses.
type engineProxy struct {
	sock  string
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (p *engineProxy) start(t testing.TB) {
	t.Helper()
	l, err := net.Listen("unix", p.sock)
	if err != nil {
		t.Fatal(err)
	}
	p.l = l
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			go func() {
				defer c.Close()
				e, err := net.Dial("unix", "/var/run/docker.sock")
				if err != nil {
					return
				}
				defer e.Close()
				go io.Copy(e, c)
				io.Copy(c, e)
			}()
		}
	}()
}

// stop closes the socket and every connection through it, as a stopped
// dockerd does.
func (p *engineProxy) stop() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// webImage is the web example's image, as the module in webDir names it.
func webImage(t *testing.T, webDir string) string {
	t.Helper()
	var web struct {
		Resources []struct {
			Container *struct {
				Image string `json:"image"`
			} `json:"container"`
		} `json:"resources"`
	}
	body, err := os.ReadFile(filepath.Join(webDir, "module.json"))
	if err == nil {
		err = json.Unmarshal(body, &web)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range web.Resources {
		if r.Container != nil {
			return r.Container.Image
		}
	}
	t.Fatalf("the module in %s declares no container", webDir)
	return ""
}

// webImageModule is a module called name whose containers (the JSON of
// each, without its image and archive) run the web example's image, its
// archive copied.
func webImageModule(t *testing.T, webDir, name string, containers ...string) string {
	t.Helper()
	image := webImage(t, webDir)
	dir := filepath.Join(t.TempDir(), name)
	os.MkdirAll(dir, 0o755)
	archive, err := os.ReadFile(filepath.Join(webDir, "web.tar"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "image.tar"), archive, 0o644)
	var resources []string
	for _, c := range containers {
		resources = append(resources, fmt.Sprintf(`{"container":{"image":%q,"archive":"image.tar",%s}}`, image, c))
	}
	manifest := fmt.Sprintf(`{"name":%q,"version":"1","resources":[%s]}`, name, strings.Join(resources, ","))
	os.WriteFile(filepath.Join(dir, "module.json"), []byte(manifest), 0o644)
	return dir
}
