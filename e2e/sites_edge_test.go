package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/dockertest"
	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/moby/moby/client"
)

// Addresses of the machines the edge's test adds to the rig's internet.
const (
	edgeIP   = "198.18.0.20" // the edge: the public names' DNS record
	clientIP = "198.18.0.30" // a browser somewhere on the internet
)

// TestEdgeServesAContainerAtAnotherSite: an edge on the internet serves
// two public names of the web example's route, whose container runs on a
// host behind NAT at site B, with the overlay on. The edge obtains a
// certificate for each name from Pebble, which validates at the edge's
// public address (Pebble and its DNS run in the edge's namespace, every
// name resolving to that address); curl from another machine on the
// internet, trusting Pebble's root alone, verifies the whole chain and
// gets site B's page for both names; plain HTTP redirects to HTTPS. The
// edge reaches the container over mesh0: the roster it holds gives the
// route at site B's overlay address, and the container publishes its
// port there alone (TestOverlayContainersAcrossSites), site B's private
// address being out of the edge's reach. Pebble takes one order
// per name.
func TestEdgeServesAContainerAtAnotherSite(t *testing.T) {
	t.Parallel()
	machine := dockertest.Client(t)
	s := newSites(t, 1)
	b := s.b.hosts[0]
	edgeNS, clientNS := s.publicMachine("edge", edgeIP), s.publicMachine("client", clientIP)
	engB := engineIn(t, b, "10.231.3.1/24")
	names := []string{"www.example.test", "shop.example.test"}
	webDir := publicWeb(t, machine, names...)
	// The edge listens on its defaults, :80 and :443, which Pebble
	// validates on.
	pb := pebbletest.Start(t, 80, 443, pebbletest.Netns(filepath.Join(sitesNS, edgeNS)), pebbletest.ResolveTo(edgeIP))

	m := s.overlayGenesis()
	edgeDir, edge := m.join(edgeNS, "front", edgeIP)
	m.join(b, "site-b", s.b.hostIPs[0], "--docker", engB.endpoint(), "--root", t.TempDir(), "--subnet", "10.213.3.0/24")
	by := m.waitMembers("ctl", "front", "site-b")
	bIP := by["site-b"].IP
	waitOverlayAddr(t, edgeNS, by["front"].IP)
	waitOverlayAddr(t, b, bIP)
	waitContainers(m, "site-b")

	mustCLIIn(t, s.ctl, "module", "register", "--dir", m.dir, webDir, example("edge"))
	mustCLIIn(t, s.ctl, "assign", "--dir", m.dir, "web", "site-b")
	mustCLIIn(t, s.ctl, "assign", "--dir", m.dir, "--set", "acme_ca="+pb.Directory, "--set", "acme_roots="+pb.TLSRoots,
		"--set", "email=ops@example.org", "edge", "front")
	pushed := time.Now()
	pushIn(t, s.ctl, m.dir)

	// The roster the edge holds sends both names to site B's overlay
	// address.
	poll.Until(t, 30*time.Second, "the edge's roster giving the public names at site-b's overlay address", func() error {
		got := publicAddrs(t, edgeDir)
		for _, n := range names {
			if got[n] != bIP {
				return fmt.Errorf("public routes %v, want each of %v at %s", got, names, bIP)
			}
		}
		return nil
	})

	// Nothing at site B's private address is in the edge's reach.
	if c, err := dialIn(edgeNS, s.b.hostIPs[0]+":8443"); err == nil {
		c.Close()
		t.Errorf("the edge reached site-b's private address %s:8443", s.b.hostIPs[0])
	}

	curl := func(args ...string) (string, error) {
		base := []string{"curl", "-sS", "--max-time", "5", "--cacert", pb.Root}
		for _, n := range names {
			base = append(base, "--resolve", n+":443:"+edgeIP, "--resolve", n+":80:"+edgeIP)
		}
		out, err := try(clientNS, append(base, args...)...)
		return strings.TrimSpace(out), err
	}
	for _, n := range names {
		poll.Until(t, 120*time.Second, n+" served over HTTPS from site-b's container, its chain verified", func() error {
			edge.alive(t)
			if out, err := curl("https://" + n + "/"); err != nil || out != "Hello from site-b" {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		})
		t.Logf("https://%s/ answered with site-b's page %s after the push", n, time.Since(pushed).Round(time.Millisecond))
		out, err := curl("-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", "http://"+n+"/x")
		if want := "308 https://" + n + "/x"; err != nil || out != want {
			t.Errorf("plain HTTP for %s: %q (%v), want %q", n, out, err, want)
		}
	}
	if orders, issued := pb.Orders(t), pb.Issued(t); orders != len(names) || issued != len(names) {
		t.Errorf("pebble took %d orders and issued %d certificates for %d names, want one each a name", orders, issued, len(names))
	}
}

// publicWeb is the directory of the web example's module, its route
// public under names.
func publicWeb(t *testing.T, machine *client.Client, names ...string) string {
	t.Helper()
	dir := exampleModule(t, machine, "web")
	path := filepath.Join(dir, "module.json")
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A map, not spec.Module: the manifest goes on as the example has it,
	// the public names added.
	var mod map[string]any
	if err := json.Unmarshal(body, &mod); err != nil {
		t.Fatalf("the web example's module.json: %v", err)
	}
	routes, _ := mod["routes"].([]any)
	if len(routes) != 1 {
		t.Fatalf("the web example has routes %v, want one", mod["routes"])
	}
	routes[0].(map[string]any)["public"] = names
	if body, err = json.Marshal(mod); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// publicAddrs are the public routes of the roster the host whose
// directory is dir holds: each name's address.
func publicAddrs(t testing.TB, dir string) map[string]string {
	t.Helper()
	st, _, err := host.ReadState(filepath.Join(dir, "host"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if len(st.Roster) == 0 {
		return got
	}
	var doc spec.RosterDoc
	if err := json.Unmarshal(st.Roster, &doc); err != nil {
		t.Fatalf("the roster %s holds: %v", dir, err)
	}
	for _, rt := range doc.Names.Routes {
		if rt.Public {
			got[rt.Name] = rt.Address
		}
	}
	return got
}

// waitContainers waits until node reports a container engine.
func waitContainers(m *sitesMesh, node string) {
	m.s.t.Helper()
	poll.Until(m.s.t, 30*time.Second, node+" reports its engine", func() error {
		for _, n := range m.nodes() {
			if n.Name == node && n.Facts != nil && slices.Contains(n.Facts.Capabilities, spec.CapContainers) {
				return nil
			}
		}
		return errors.New(node + " has no containers capability yet")
	})
}
