package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/dockertest"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/miekg/dns"
	"github.com/moby/moby/client"
)

// TestContainersFindEachOtherByName is the promise: a container on
// beta finds web.alpha.internal through beta's resolver and fetches alpha's
// page; a roster change replaces nothing (invariant 2); an environment
// change replaces exactly its container and the same declaration again
// changes nothing (invariant 3); a container killed by hand runs again at
// reconcile and is reported; unassigning removes (invariant 5).
func TestContainersFindEachOtherByName(t *testing.T) {
	t.Parallel()
	m := newContainerMesh(t)
	mustRun(t, "module", "register", "--dir", m.dir, m.webDir, m.clientModDir)
	mustRun(t, "assign", "--dir", m.dir, "web", m.a)
	// The client fetches web.alpha.internal unless told: this mesh's alpha.
	mustRun(t, "assign", "--dir", m.dir, "--set", "target=web."+m.a+".internal:"+webPort, "client", m.b)
	o := push(t, m.dir)
	if got := outcomes(o); got[m.a]["web:container:web"] != spec.Created || got[m.a]["mesh:network:mesh-"+m.a] != spec.Created ||
		got[m.b]["client:container:client"] != spec.Created {
		t.Fatalf("first push: %v", got)
	}

	// From inside beta's container: the name answers through beta's
	// resolver (the engine's embedded DNS forwards only to the container's
	// DNS server, beta's gateway, where only beta's resolver listens; the
	// upstream is dead and knows no .internal anyway), and the route serves
	// alpha's page.
	ctr, _ := m.container(t, m.b, "client")
	gatewayB := m.subnetB.Addr().Next()
	if dnsServers := ctr.Container.HostConfig.DNS; len(dnsServers) != 1 || dnsServers[0] != gatewayB {
		t.Errorf("beta's container has DNS servers %v, want only beta's gateway %s", dnsServers, gatewayB)
	}
	poll.Until(t, 30*time.Second, "beta's container looked web.alpha.internal up", func() error {
		b, err := os.ReadFile(filepath.Join(m.rootB, "srv/client/lookup"))
		if err == nil && strings.Contains(string(b), "Name:\tweb."+m.a+".internal") && strings.Contains(string(b), m.addrA) {
			return nil
		}
		return fmt.Errorf("%q %v", b, err)
	})
	poll.Until(t, 30*time.Second, "beta's container fetched alpha's page by name", func() error {
		b, err := os.ReadFile(filepath.Join(m.rootB, "srv/client/page"))
		if err == nil && string(b) == "Hello from "+m.a+"\n" {
			return nil
		}
		return fmt.Errorf("%q %v", b, err)
	})
	// A route added on beta changes the roster every host holds, alpha's
	// too, as one roster message: no declaration is sent (neither node's
	// resources change), no container is replaced, no host writes a
	// resource, and the engine sees no lifecycle event.
	webID, clientID := m.id(t, m.a, "web"), m.id(t, m.b, "client")
	routeOnly := filepath.Join(t.TempDir(), "extra")
	os.MkdirAll(routeOnly, 0o755)
	os.WriteFile(filepath.Join(routeOnly, "module.json"), []byte(`{"name":"extra","version":"1","routes":[{"name":"extra","port":9}],"resources":[]}`), 0o644)
	mustRun(t, "module", "register", "--dir", m.dir, routeOnly)
	mustRun(t, "assign", "--dir", m.dir, "extra", m.b)
	since := time.Now()
	o = push(t, m.dir)
	for node, dir := range map[string]string{m.a: m.dir, m.b: m.betaDir} {
		poll.Until(t, 10*time.Second, node+"'s resolver answers the new route", func() error {
			r, err := ask(t, dnsAddr(t, dir), "extra."+m.b+".internal", dns.TypeA)
			if err != nil {
				return err
			}
			if answers(r) == m.addrB {
				return nil
			}
			return errors.New(r.String())
		})
		if !strings.Contains(keptRoster(t, dir), "extra."+m.b+".internal") {
			t.Errorf("%s's kept roster lacks the new route: %s", node, keptRoster(t, dir))
		}
		if !unchangedNotSent(o, node) {
			t.Errorf("a roster change: %s was sent a declaration: %+v", node, o.Nodes)
		}
	}
	if m.id(t, m.a, "web") != webID || m.id(t, m.b, "client") != clientID {
		t.Error("a roster change replaced a container")
	}
	if ev := m.lifecycle(t, since); len(ev) != 0 {
		t.Errorf("a roster change: the engine saw %v, want nothing", ev)
	}

	// An environment change replaces exactly that container; pushed again,
	// nothing changes.
	mustRun(t, "assign", "--dir", m.dir, "--set", "greeting=Hi", "web", m.a)
	since = time.Now()
	o = push(t, m.dir)
	if got := outcomes(o); got[m.a]["web:container:web"] != spec.Changed || !unchangedNotSent(o, m.b) {
		t.Errorf("an environment change of alpha's: %v, and beta (whose declaration it leaves as it was) not sent: %+v", got, o.Nodes)
	}
	if m.id(t, m.a, "web") == webID {
		t.Error("an environment change kept alpha's web container")
	}
	if m.id(t, m.b, "client") != clientID {
		t.Error("an environment change on alpha replaced beta's client")
	}
	newWebID := m.id(t, m.a, "web")
	for _, ev := range m.lifecycle(t, since) {
		if !strings.HasSuffix(ev, " "+m.a+"-web") && !strings.HasSuffix(ev, " "+webID) && !strings.HasSuffix(ev, " "+newWebID) {
			t.Errorf("an environment change of alpha's web: the engine saw %q", ev)
		}
	}
	poll.Until(t, 30*time.Second, "the new greeting fetched by name", func() error {
		b, err := os.ReadFile(filepath.Join(m.rootB, "srv/client/page"))
		if err == nil && string(b) == "Hi from "+m.a+"\n" {
			return nil
		}
		return fmt.Errorf("%q %v", b, err)
	})
	since = time.Now()
	o = push(t, m.dir, "--force")
	for _, node := range []string{m.a, m.b} {
		if w := reportOf(t, o, node).Writes; w != 0 {
			t.Errorf("the same declaration again: %s counted %d writes (mutating engine calls included), want none", node, w)
		}
	}
	if ev := m.lifecycle(t, since); len(ev) != 0 {
		t.Errorf("the same declaration again: the engine saw %v, want nothing", ev)
	}

	// Killed by hand: running again after alpha's next reconcile, and
	// reported with why it had stopped.
	webID = m.id(t, m.a, "web")
	if _, err := m.cli.ContainerKill(context.Background(), webID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 30*time.Second, "alpha's reconcile reported web started again", func() error {
		n := nodeShow(t, m.dir, m.a)
		if n.LastReport == nil || !n.LastReport.Reconcile {
			return fmt.Errorf("last report %+v", n.LastReport)
		}
		for _, res := range n.LastReport.Results {
			if res.Name == "web:container:web" {
				if res.Outcome == spec.Changed && strings.Contains(res.Note, "started again") && strings.Contains(res.Note, "137") {
					return nil
				}
				return fmt.Errorf("%+v", res)
			}
		}
		return errors.New("no result for web")
	})
	if got, _ := m.container(t, m.a, "web"); !got.Container.State.Running || got.Container.ID != webID {
		t.Errorf("after reconcile alpha's web is running %v, the same container %v", got.Container.State.Running, got.Container.ID == webID)
	}

	// beta's host restarts: its container is left running as it is, and
	// its resolver serves the network's gateway again.
	m.beta.stop(t)
	os.Remove(filepath.Join(m.rootB, "srv/client/lookup"))
	since = time.Now()
	start(t, "host", "--dir", m.betaDir, "--root", m.rootB, "--subnet", m.subnetB.String(), "--heartbeat", "500ms",
		"--dns", port(t), "--dns-upstream", deadUpstream)
	poll.Until(t, 30*time.Second, "beta's container looks web.alpha.internal up again after beta's host restarted", func() error {
		b, err := os.ReadFile(filepath.Join(m.rootB, "srv/client/lookup"))
		if err == nil && strings.Contains(string(b), m.addrA) {
			return nil
		}
		return fmt.Errorf("%q %v", b, err)
	})
	if m.id(t, m.b, "client") != clientID {
		t.Error("beta's host restarting replaced its container")
	}
	if ev := m.lifecycle(t, since); len(ev) != 0 {
		t.Errorf("beta's host restarting: the engine saw %v, want nothing", ev)
	}

	// Unassigned: the container goes, and beta's network with its last one.
	// What the container wrote stays, and so does the directory holding it
	// (its on_remove is keep, the default), which the report notes: the
	// push succeeds.
	mustRun(t, "unassign", "--dir", m.dir, "client", m.b)
	o, code := pushJSON(t, m.dir)
	if got := outcomes(o); code != 0 || got[m.b]["client:container:client"] != spec.Removed || got[m.b]["mesh:network:mesh-"+m.b] != spec.Removed {
		t.Errorf("unassign: exit %d, %v", code, got)
	}
	for _, r := range reportOf(t, o, m.b).Results {
		if r.Name == "client:directory:/srv/client" && (r.Outcome != spec.Removed || !strings.Contains(r.Note, "left in place with the 2 entries it holds: lookup, page;")) {
			t.Errorf("unassign: the directory the container wrote in: %+v", r)
		}
	}
	if _, err := os.Stat(filepath.Join(m.rootB, "srv/client/page")); err != nil {
		t.Errorf("what the container wrote, after unassign: %v", err)
	}
	if _, ok := m.container(t, m.b, "client"); ok {
		t.Error("beta's client is still there after unassign and push")
	}
}

// TestNoEngineNoContainers: a host whose engine does not answer reports no
// containers capability, and says why among its facts; composing a
// container for it is that node's own failure, naming the module, and
// nothing is sent to it while the other nodes get theirs. Needs no engine.
func TestNoEngineNoContainers(t *testing.T) {
	t.Parallel()
	endpoint := dockertest.DeadEngine(t)
	sock := strings.TrimPrefix(endpoint, "unix://")
	m := newMesh(t, "--root", t.TempDir())
	join(t, m.token(t, "beta"), "--root", t.TempDir(), "--docker", endpoint)
	var beta spec.Node
	poll.Until(t, 30*time.Second, "beta's facts", func() error {
		beta = nodeShow(t, m.dir, "beta")
		if beta.Facts != nil {
			return nil
		}
		return errors.New("no facts yet")
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
	mustRun(t, "module", "register", "--dir", m.dir, mod, example("motd"))
	mustRun(t, "assign", "--dir", m.dir, "boxed", "beta")
	mustRun(t, "assign", "--dir", m.dir, "motd", "alpha")
	o, code := pushJSON(t, m.dir)
	if code == 0 {
		t.Errorf("a push with a node that does not compose exited 0")
	}
	seen := map[string]bool{}
	for _, n := range o.Nodes {
		seen[n.Node] = true
		switch n.Node {
		case "beta":
			if n.Seq != 0 || !strings.Contains(n.Error, `module "boxed" declares container "box"`) || !strings.Contains(n.Error, spec.CapContainers) {
				t.Errorf("beta: %+v, want not sent, naming the module and the capability", n.PushNode)
			}
		case "alpha":
			if n.Report == nil || len(n.Report.Results) == 0 || n.Report.Results[0].Outcome != spec.Created {
				t.Errorf("alpha: %+v, want its own declaration applied", n)
			}
		}
	}
	if !seen["alpha"] || !seen["beta"] {
		t.Errorf("the push's result names %v, want alpha and beta", seen)
	}
}

// TestCapabilityFollowsTheEngine: a host reports the containers capability
// only while its engine answers, and says so within a few heartbeats of a
// change, either way.
func TestCapabilityFollowsTheEngine(t *testing.T) {
	t.Parallel()
	dockertest.Client(t)
	p := &engineProxy{sock: filepath.Join(t.TempDir(), "engine.sock")}
	p.start(t)
	t.Cleanup(p.stop)
	m := newMesh(t, "--root", t.TempDir())
	join(t, m.token(t, "beta"), "--root", t.TempDir(), "--docker", "unix://"+p.sock)
	capable := func(want bool) func() error {
		return func() error {
			n := nodeShow(t, m.dir, "beta")
			if n.Facts == nil {
				return errors.New("no facts yet")
			}
			if slices.Contains(n.Facts.Capabilities, spec.CapContainers) == want {
				return nil
			}
			return fmt.Errorf("capabilities %v, errors %v", n.Facts.Capabilities, n.Facts.Errors)
		}
	}
	poll.Until(t, 30*time.Second, "beta reports the containers capability", capable(true))
	p.stop()
	poll.Until(t, 30*time.Second, "beta no longer reports it once its engine stopped", capable(false))
	p.start(t)
	poll.Until(t, 30*time.Second, "beta reports it again once its engine answers", capable(true))
}
