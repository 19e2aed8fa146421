package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/mesh-fleet/mesh/cli"
	"github.com/mesh-fleet/mesh/internal/dockertest"
	"github.com/mesh-fleet/mesh/spec"
)

// containerMesh is a mesh of two nodes, alpha and beta, whose hosts run
// containers in the machine's Docker engine: each on an address of its own
// on the loopback interface and a container network of its own.
type containerMesh struct {
	*testMesh
	cli                  *client.Client
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
	// One a killed run left behind serves as well.
	if out, err := exec.Command("ip", "addr", "add", addr+"/32", "dev", "lo").CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
		t.Fatalf("ip addr add %s dev lo (the container tests run as root): %v: %s", addr, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "addr", "del", addr+"/32", "dev", "lo").Run() })
}

// exampleModule copies examples/NAME into a directory of the test's, with
// its image built under tag (FROM scratch, busybox) and saved as the
// archive the module names.
func exampleModule(t *testing.T, cli *client.Client, name, tag string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(filepath.Join("..", "examples", name, "module.json"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.ReplaceAll(string(body), "mesh-example/"+name+":1", tag)
	if err := os.WriteFile(filepath.Join(dir, "module.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	dockertest.Build(t, cli, tag, nil)
	dockertest.Save(t, cli, tag, filepath.Join(dir, name+".tar"))
	return dir
}

// newContainerMesh starts alpha (genesis, reconciling every second unless
// alphaFlags say otherwise: a later flag wins) and beta, and waits for both
// to report a container engine.
func newContainerMesh(t *testing.T, alphaFlags ...string) *containerMesh {
	cli := dockertest.Client(t)
	r := mrand.IntN(120) + 1
	m := &containerMesh{cli: cli, rootA: t.TempDir(), rootB: t.TempDir(),
		addrA: fmt.Sprintf("10.216.%d.1", r), addrB: fmt.Sprintf("10.216.%d.2", r),
		// The e2e tests take 10.215.0.0/16 (the host's tests another).
		subnetA: netip.MustParsePrefix(fmt.Sprintf("10.215.%d.0/24", 2*r)),
		subnetB: netip.MustParsePrefix(fmt.Sprintf("10.215.%d.0/24", 2*r+1)),
	}
	loopbackAddress(t, m.addrA)
	loopbackAddress(t, m.addrB)
	m.webDir = exampleModule(t, cli, "web", fmt.Sprintf("mesh-test/web-%d:1", r))
	m.clientModDir = exampleModule(t, cli, "client", fmt.Sprintf("mesh-test/client-%d:1", r))
	// Removed after the hosts stop (cleanups run last first), before the
	// images go.
	for _, node := range []string{"alpha", "beta"} {
		dockertest.RemoveNode(cli, node)
		t.Cleanup(func() { dockertest.RemoveNode(cli, node) })
	}

	m.testMesh = newMesh(t, append([]string{"--root", m.rootA, "--address", m.addrA, "--subnet", m.subnetA.String(), "--reconcile", "1s"}, alphaFlags...)...)
	m.betaDir, m.beta = join(t, m.token(t, "beta"), "--root", m.rootB, "--address", m.addrB, "--subnet", m.subnetB.String())
	eventually(t, 30*time.Second, "both hosts report a container engine", func() (bool, string) {
		var have []string
		for _, n := range nodeList(t, m.dir) {
			if n.Facts != nil && slices.Contains(n.Facts.Capabilities, spec.CapContainers) {
				have = append(have, n.Name)
			}
		}
		return len(have) == 2, fmt.Sprintf("with the containers capability: %v", have)
	})
	return m
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

// lifecycle is the lifecycle events of alpha's and beta's containers and
// networks between since and now.
func (m *containerMesh) lifecycle(t *testing.T, since time.Time) []string {
	t.Helper()
	return engineEvents(t, m.cli, since, "alpha", "beta")
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

// reportOf is node's report in a push, which must have one.
func reportOf(t *testing.T, o cli.PushOutcome, node string) *spec.Report {
	t.Helper()
	for _, n := range o.Nodes {
		if n.Node == node {
			if n.Report == nil {
				t.Fatalf("no report from %s: %+v", node, n)
			}
			return n.Report
		}
	}
	t.Fatalf("%s is not in the push: %+v", node, o)
	return nil
}

func push(t *testing.T, dir string) cli.PushOutcome {
	t.Helper()
	o, code := pushJSON(t, dir)
	if code != 0 || !o.OK {
		var why []string
		for _, n := range o.Nodes {
			if n.Report != nil {
				for _, r := range n.Report.Results {
					if r.Error != "" {
						why = append(why, n.Node+": "+r.Name+": "+r.Error)
					}
				}
			}
		}
		t.Fatalf("push: exit %d: %+v\n%s", code, o, strings.Join(why, "\n"))
	}
	return o
}

// TestContainersFindEachOtherByName is the promise: a container on
// beta finds web.alpha.internal through beta's resolver and fetches alpha's
// page; a roster change replaces nothing (invariant 2); an environment
// change replaces exactly its container and the same declaration again
// changes nothing (invariant 3); a container killed by hand runs again at
// reconcile and is reported; unassigning removes (invariant 5).
func TestContainersFindEachOtherByName(t *testing.T) {
	m := newContainerMesh(t)
	mustRun(t, "module", "register", "--dir", m.dir, m.webDir, m.clientModDir)
	mustRun(t, "assign", "--dir", m.dir, "web", "alpha")
	mustRun(t, "assign", "--dir", m.dir, "client", "beta")
	o := push(t, m.dir)
	if got := outcomes(o); got["alpha"]["web:container:web"] != spec.Created || got["alpha"]["mesh:network:mesh-alpha"] != spec.Created ||
		got["beta"]["client:container:client"] != spec.Created {
		t.Fatalf("first push: %v", got)
	}

	// From inside beta's container: the name answers through beta's
	// resolver (the engine's embedded DNS forwards only to the container's
	// DNS server, beta's gateway, where only beta's resolver listens; the
	// upstream is dead and knows no .internal anyway), and the route serves
	// alpha's page.
	ctr, _ := m.container(t, "beta", "client")
	gatewayB := m.subnetB.Addr().Next()
	if dnsServers := ctr.Container.HostConfig.DNS; len(dnsServers) != 1 || dnsServers[0] != gatewayB {
		t.Errorf("beta's container has DNS servers %v, want only beta's gateway %s", dnsServers, gatewayB)
	}
	eventually(t, 30*time.Second, "beta's container looked web.alpha.internal up", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(m.rootB, "srv/client/lookup"))
		return err == nil && strings.Contains(string(b), "Name:\tweb.alpha.internal") && strings.Contains(string(b), m.addrA), fmt.Sprintf("%q %v", b, err)
	})
	eventually(t, 30*time.Second, "beta's container fetched alpha's page by name", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(m.rootB, "srv/client/page"))
		return err == nil && string(b) == "Hello from alpha\n", fmt.Sprintf("%q %v", b, err)
	})
	// A route added on beta changes every roster, alpha's too: no container
	// is replaced, and the engine sees no lifecycle event.
	webID, clientID := m.id(t, "alpha", "web"), m.id(t, "beta", "client")
	routeOnly := filepath.Join(t.TempDir(), "extra")
	os.MkdirAll(routeOnly, 0o755)
	os.WriteFile(filepath.Join(routeOnly, "module.json"), []byte(`{"name":"extra","version":"1","routes":[{"name":"extra","port":9}],"resources":[]}`), 0o644)
	mustRun(t, "module", "register", "--dir", m.dir, routeOnly)
	mustRun(t, "assign", "--dir", m.dir, "extra", "beta")
	since := time.Now()
	o = push(t, m.dir)
	if !strings.Contains(keptRoster(t, m.dir), "extra.beta.internal") {
		t.Fatalf("alpha's kept roster lacks the new route: %s", keptRoster(t, m.dir))
	}
	for _, node := range []string{"alpha", "beta"} {
		rep := reportOf(t, o, node)
		for _, res := range rep.Results {
			if res.Outcome != spec.Unchanged {
				t.Errorf("a roster change: %s's %s is %s", node, res.Name, res.Outcome)
			}
		}
		if rep.Writes != 0 {
			t.Errorf("a roster change: %s counted %d writes, want none", node, rep.Writes)
		}
	}
	if m.id(t, "alpha", "web") != webID || m.id(t, "beta", "client") != clientID {
		t.Error("a roster change replaced a container")
	}
	if ev := m.lifecycle(t, since); len(ev) != 0 {
		t.Errorf("a roster change: the engine saw %v, want nothing", ev)
	}

	// An environment change replaces exactly that container; pushed again,
	// nothing changes.
	mustRun(t, "assign", "--dir", m.dir, "--set", "greeting=Hi", "web", "alpha")
	since = time.Now()
	o = push(t, m.dir)
	if got := outcomes(o); got["alpha"]["web:container:web"] != spec.Changed || got["beta"]["client:container:client"] != spec.Unchanged {
		t.Errorf("an environment change: %v", got)
	}
	if m.id(t, "alpha", "web") == webID {
		t.Error("an environment change kept alpha's web container")
	}
	if m.id(t, "beta", "client") != clientID {
		t.Error("an environment change on alpha replaced beta's client")
	}
	newWebID := m.id(t, "alpha", "web")
	for _, ev := range m.lifecycle(t, since) {
		if !strings.HasSuffix(ev, " alpha-web") && !strings.HasSuffix(ev, " "+webID) && !strings.HasSuffix(ev, " "+newWebID) {
			t.Errorf("an environment change of alpha's web: the engine saw %q", ev)
		}
	}
	eventually(t, 30*time.Second, "the new greeting fetched by name", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(m.rootB, "srv/client/page"))
		return err == nil && string(b) == "Hi from alpha\n", fmt.Sprintf("%q %v", b, err)
	})
	since = time.Now()
	o = push(t, m.dir)
	for _, node := range []string{"alpha", "beta"} {
		if w := reportOf(t, o, node).Writes; w != 0 {
			t.Errorf("the same declaration again: %s counted %d writes (mutating engine calls included), want none", node, w)
		}
	}
	if ev := m.lifecycle(t, since); len(ev) != 0 {
		t.Errorf("the same declaration again: the engine saw %v, want nothing", ev)
	}

	// Killed by hand: running again after alpha's next reconcile, and
	// reported with why it had stopped.
	webID = m.id(t, "alpha", "web")
	if _, err := m.cli.ContainerKill(context.Background(), webID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "alpha's reconcile reported web started again", func() (bool, string) {
		n := nodeShow(t, m.dir, "alpha")
		if n.LastReport == nil || !n.LastReport.Reconcile {
			return false, fmt.Sprintf("last report %+v", n.LastReport)
		}
		for _, res := range n.LastReport.Results {
			if res.Name == "web:container:web" {
				return res.Outcome == spec.Changed && strings.Contains(res.Note, "started again") && strings.Contains(res.Note, "137"), fmt.Sprintf("%+v", res)
			}
		}
		return false, "no result for web"
	})
	if got, _ := m.container(t, "alpha", "web"); !got.Container.State.Running || got.Container.ID != webID {
		t.Errorf("after reconcile alpha's web is running %v, the same container %v", got.Container.State.Running, got.Container.ID == webID)
	}

	// beta's host restarts: its container is left running as it is, and
	// its resolver serves the network's gateway again.
	m.beta.stop(t)
	os.Remove(filepath.Join(m.rootB, "srv/client/lookup"))
	since = time.Now()
	start(t, "host", "--dir", m.betaDir, "--root", m.rootB, "--subnet", m.subnetB.String(), "--heartbeat", "500ms",
		"--dns", "127.0.0.1:0", "--dns-upstream", deadUpstream)
	eventually(t, 30*time.Second, "beta's container looks web.alpha.internal up again after beta's host restarted", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(m.rootB, "srv/client/lookup"))
		return err == nil && strings.Contains(string(b), m.addrA), fmt.Sprintf("%q %v", b, err)
	})
	if m.id(t, "beta", "client") != clientID {
		t.Error("beta's host restarting replaced its container")
	}
	if ev := m.lifecycle(t, since); len(ev) != 0 {
		t.Errorf("beta's host restarting: the engine saw %v, want nothing", ev)
	}

	// Unassigned: the container goes, and beta's network with its last one.
	// What the container wrote stays, and so does the directory holding it
	// (its on_remove is keep, the default), which the report notes: the
	// push succeeds.
	mustRun(t, "unassign", "--dir", m.dir, "client", "beta")
	o, code := pushJSON(t, m.dir)
	if got := outcomes(o); code != 0 || got["beta"]["client:container:client"] != spec.Removed || got["beta"]["mesh:network:mesh-beta"] != spec.Removed {
		t.Errorf("unassign: exit %d, %v", code, got)
	}
	for _, r := range reportOf(t, o, "beta").Results {
		if r.Name == "client:directory:/srv/client" && (r.Outcome != spec.Removed || !strings.Contains(r.Note, "left in place with the 2 entries it holds: lookup, page;")) {
			t.Errorf("unassign: the directory the container wrote in: %+v", r)
		}
	}
	if _, err := os.Stat(filepath.Join(m.rootB, "srv/client/page")); err != nil {
		t.Errorf("what the container wrote, after unassign: %v", err)
	}
	if _, ok := m.container(t, "beta", "client"); ok {
		t.Error("beta's client is still there after unassign and push")
	}
}

// nodeShow is mesh node show --json NODE.
func nodeShow(t *testing.T, dir, node string) spec.Node {
	t.Helper()
	var n spec.Node
	out := mustRun(t, "node", "show", "--dir", dir, "--json", node)
	if err := json.Unmarshal([]byte(out), &n); err != nil {
		t.Fatalf("mesh node show --json: %v\n%s", err, out)
	}
	return n
}

// TestNoEngineNoContainers: a host whose engine does not answer reports no
// containers capability, and says why among its facts; composing a
// container for it is that node's own failure, naming the module, and
// nothing is sent to it while the other nodes get theirs. Needs no engine.
func TestNoEngineNoContainers(t *testing.T) {
	endpoint := dockertest.DeadEngine(t)
	sock := strings.TrimPrefix(endpoint, "unix://")
	m := newMesh(t, "--root", t.TempDir())
	join(t, m.token(t, "beta"), "--root", t.TempDir(), "--docker", endpoint)
	var beta spec.Node
	eventually(t, 30*time.Second, "beta's facts", func() (bool, string) {
		beta = nodeShow(t, m.dir, "beta")
		return beta.Facts != nil, "no facts yet"
	})
	if slices.Contains(beta.Facts.Capabilities, spec.CapContainers) {
		t.Errorf("beta reports the containers capability with no engine: %v", beta.Facts.Capabilities)
	}
	if errs := strings.Join(beta.Facts.Errors, "\n"); !strings.Contains(errs, "container engine") || !strings.Contains(errs, sock) {
		t.Errorf("beta's facts do not say why it has no engine: %q", errs)
	}

	mod := filepath.Join(t.TempDir(), "boxed")
	os.MkdirAll(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "image.tar"), []byte("not loaded: nothing is sent"), 0o644)
	os.WriteFile(filepath.Join(mod, "module.json"), []byte(`{"name":"boxed","version":"1","resources":[
		{"container":{"name":"box","image":"mesh-test/box:1","archive":"image.tar"}}]}`), 0o644)
	mustRun(t, "module", "register", "--dir", m.dir, mod, "../examples/motd")
	mustRun(t, "assign", "--dir", m.dir, "boxed", "beta")
	mustRun(t, "assign", "--dir", m.dir, "motd", "alpha")
	o, code := pushJSON(t, m.dir)
	if code == 0 {
		t.Errorf("a push with a node that does not compose exited 0")
	}
	for _, n := range o.Nodes {
		switch n.Node {
		case "beta":
			if n.Seq != 0 || !strings.Contains(n.Error, `module "boxed" declares container "box"`) || !strings.Contains(n.Error, spec.CapContainers) {
				t.Errorf("beta: %+v, want not sent, naming the module and the capability", n.PushNode)
			}
		case "alpha":
			if n.Report == nil || n.Report.Results[0].Outcome != spec.Created {
				t.Errorf("alpha: %+v, want its own declaration applied", n)
			}
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

// TestCapabilityFollowsTheEngine: a host reports the containers capability
// only while its engine answers, and says so within a few heartbeats of a
// change, either way.
func TestCapabilityFollowsTheEngine(t *testing.T) {
	dockertest.Client(t)
	p := &engineProxy{sock: filepath.Join(t.TempDir(), "engine.sock")}
	p.start(t)
	t.Cleanup(p.stop)
	m := newMesh(t, "--root", t.TempDir())
	join(t, m.token(t, "beta"), "--root", t.TempDir(), "--docker", "unix://"+p.sock)
	capable := func(want bool) func() (bool, string) {
		return func() (bool, string) {
			n := nodeShow(t, m.dir, "beta")
			if n.Facts == nil {
				return false, "no facts yet"
			}
			return slices.Contains(n.Facts.Capabilities, spec.CapContainers) == want, fmt.Sprintf("capabilities %v, errors %v", n.Facts.Capabilities, n.Facts.Errors)
		}
	}
	eventually(t, 30*time.Second, "beta reports the containers capability", capable(true))
	p.stop()
	eventually(t, 30*time.Second, "beta no longer reports it once its engine stopped", capable(false))
	p.start(t)
	eventually(t, 30*time.Second, "beta reports it again once its engine answers", capable(true))
}
