package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/cli"
	"github.com/mesh-fleet/mesh/internal/dockertest"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/moby/moby/client"
)

// A Docker Engine of a rig namespace's own: the machine a namespace plays
// runs its containers in it, on its own network. Nothing of it is shared
// with the machine's engine or another namespace's: its socket, data,
// state, containerd and pid file lie in a directory of the test's, and it
// runs in a mount namespace of its own with a tmpfs on each directory an
// engine uses whatever its flags say (/run/docker for libnetwork's
// sockets and plugins, /run/containerd for the shims' sockets, /etc/docker
// for its key). Its firewall rules are its network namespace's.

// siteEngine is a dockerd running in a rig namespace.
type siteEngine struct {
	ns   string
	sock string // its API's unix socket
	cli  *client.Client
}

// endpoint is the engine's address as mesh host --docker takes it.
func (e *siteEngine) endpoint() string { return "unix://" + e.sock }

// engineIn starts a dockerd in namespace ns, its default bridge on bip
// (an address and prefix apart from every range of the rig and of the
// machine), and waits until its API answers. It is stopped when the test
// ends, after whatever started later (the hosts using it); its output is
// logged if the test failed.
func engineIn(t testing.TB, ns, bip string) *siteEngine {
	t.Helper()
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Fatalf("an engine in a namespace needs dockerd (.ci/run installs docker.io): %v", err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "daemon.json")
	if err := os.WriteFile(config, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := &siteEngine{ns: ns, sock: filepath.Join(dir, "docker.sock")}
	wrap := []string{"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
		`for d in /run/docker /run/containerd /etc/docker; do mkdir -p $d && mount -t tmpfs tmpfs $d || exit 1; done; exec "$@"`, "sh"}
	args := append(wrap, "dockerd", "--config-file", config,
		"--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "x"),
		"--pidfile", filepath.Join(dir, "docker.pid"), "-H", e.endpoint(), "--bip", bip)
	d := &daemon{cmd: command(ns, args...), out: &syncBuffer{}, done: make(chan error, 1)}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		// SIGTERM: dockerd stops its containers and its containerd, and
		// its mount namespace (with every mount it made) goes with the
		// last of them.
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(45 * time.Second):
			t.Errorf("dockerd in %s did not stop within 45 s of SIGTERM: killed", ns)
			d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("in %s: dockerd output:\n%s", ns, d.out.String())
		}
	})
	c, err := client.New(client.WithHost(e.endpoint()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.cli = c
	poll.Until(t, 60*time.Second, "dockerd's API in "+ns, func() error {
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("dockerd in %s exited: %v:\n%s", ns, err, d.out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		return err
	})
	return e
}

// pushIn pushes from namespace ns (where the controller is reachable) and
// returns what mesh push --json says, which must be a success everywhere.
func pushIn(t testing.TB, ns, dir string) cli.PushOutcome {
	t.Helper()
	out, errOut, code := cliIn(t, ns, "push", "--dir", dir, "--json", "--wait", "3m")
	var o cli.PushOutcome
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("mesh push --json: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
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

// TestOverlayContainersAcrossSites: containers at two sites behind NAT
// reach each other by name over the overlay, with the examples' modules
// as they are. Each site's host runs its containers in an engine of its
// own; site B's runs web (published on port 8443), site A's runs client,
// which looks web.site-b.internal up through its node's resolver (the
// engine's embedded DNS forwards to the network's gateway) and fetches the
// page over TLS. The name is B's overlay address, the connection leaves
// A's container network masqueraded to A's overlay address and goes
// through the controller's relay. B publishes the port on its overlay
// address alone: its private address, which its own site reaches, has
// nothing there.
func TestOverlayContainersAcrossSites(t *testing.T) {
	t.Parallel()
	machine := dockertest.Client(t)
	s := newSites(t, 1)
	a, b := s.a.hosts[0], s.b.hosts[0]
	engA := engineIn(t, a, "10.231.1.1/24")
	engB := engineIn(t, b, "10.231.2.1/24")
	webDir, clientDir := exampleModule(t, machine, "web"), exampleModule(t, machine, "client")

	m := s.overlayGenesis()
	rootA, rootB := t.TempDir(), t.TempDir()
	m.join(a, "site-a", s.a.hostIPs[0], "--docker", engA.endpoint(), "--root", rootA, "--subnet", "10.213.1.0/24")
	m.join(b, "site-b", s.b.hostIPs[0], "--docker", engB.endpoint(), "--root", rootB, "--subnet", "10.213.2.0/24")
	by := m.waitMembers("ctl", "site-a", "site-b")
	aIP, bIP := by["site-a"].IP, by["site-b"].IP
	waitOverlayAddr(t, a, aIP)
	waitOverlayAddr(t, b, bIP)
	poll.Until(t, 30*time.Second, "both hosts report their engine", func() error {
		have := map[string]bool{}
		for _, n := range m.nodes() {
			if n.Facts != nil {
				for _, c := range n.Facts.Capabilities {
					have[n.Name] = have[n.Name] || c == spec.CapContainers
				}
			}
		}
		if have["site-a"] && have["site-b"] {
			return nil
		}
		return fmt.Errorf("with the containers capability: %v", have)
	})

	mustCLIIn(t, s.ctl, "module", "register", "--dir", m.dir, webDir, clientDir)
	mustCLIIn(t, s.ctl, "assign", "--dir", m.dir, "web", "site-b")
	mustCLIIn(t, s.ctl, "assign", "--dir", m.dir, "--set", "target=web.site-b.internal:8443", "client", "site-a")
	pushIn(t, s.ctl, m.dir)
	resolvesTo(t, a, "web.site-b.internal", bIP)

	// B's web publishes 8443 on B's overlay address.
	ctx := context.Background()
	web, err := engB.cli.ContainerInspect(ctx, spec.ContainerName("site-b", "web"), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var bound []string
	for port, bindings := range web.Container.HostConfig.PortBindings {
		for _, pb := range bindings {
			bound = append(bound, fmt.Sprintf("%s:%s->%s", pb.HostIP, pb.HostPort, port))
		}
	}
	if want := bIP + ":8443->8443/tcp"; len(bound) != 1 || bound[0] != want {
		t.Errorf("site-b's web publishes %v, want [%s]", bound, want)
	}

	// From inside A's container: the name through A's resolver, and the
	// page over TLS through the overlay.
	poll.Until(t, 60*time.Second, "site A's container looked web.site-b.internal up", func() error {
		got, err := os.ReadFile(filepath.Join(rootA, "srv/client/lookup"))
		if err == nil && strings.Contains(string(got), "Name:\tweb.site-b.internal") && strings.Contains(string(got), bIP) {
			return nil
		}
		return fmt.Errorf("%q %v", got, err)
	})
	start := time.Now()
	poll.Until(t, 90*time.Second, "site A's container fetched site B's page by name", func() error {
		got, err := os.ReadFile(filepath.Join(rootA, "srv/client/page"))
		if err == nil && string(got) == "Hello from site-b\n" {
			return nil
		}
		return fmt.Errorf("%q %v", got, err)
	})
	t.Logf("site A's container fetched https://web.site-b.internal:8443/ (%s) %s after the push", bIP, time.Since(start).Round(time.Millisecond))

	// Nothing listens on B's private address: not from site A (no route),
	// and not from B's own router, which reaches that address.
	private := s.b.hostIPs[0] + ":8443"
	for _, from := range []string{a, s.b.router} {
		if c, err := dialIn(from, private); err == nil {
			c.Close()
			t.Errorf("%s reached site-b's web at its private address %s", from, private)
		}
	}
	if c, err := dialIn(b, bIP+":8443"); err != nil {
		t.Errorf("site B does not reach its own web at %s:8443: %v", bIP, err)
	} else {
		c.Close()
	}
}
