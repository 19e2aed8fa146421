package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
)

// TestSitesCannotReachEachOther holds the sites rig to what the overlay
// tests take for granted: a host at one site cannot reach a host at the
// other by its private address, and both reach the controller's public
// address, seen there as their router's (the NAT).
func TestSitesCannotReachEachOther(t *testing.T) {
	t.Parallel()
	s := newSites(t, 1)
	a, b := s.a.hosts[0], s.b.hosts[0]
	bAddr := s.b.hostIPs[0] + ":7000"
	echo(t, b, bAddr)
	echo(t, s.ctl, controllerIP+":7000")

	// The listener at B serves: its own site reaches it.
	if _, err := dialEcho(b, bAddr); err != nil {
		t.Fatalf("B's host does not reach its own listener: %v", err)
	}
	// A does not, neither by TCP nor by ping.
	if from, err := dialEcho(a, bAddr); err == nil {
		t.Errorf("a host at site A reached %s at site B (seen from %s)", bAddr, from)
	}
	if err := ping(a, s.b.hostIPs[0]); err == nil {
		t.Errorf("a host at site A pings %s at site B", s.b.hostIPs[0])
	}
	// Nor does B reach A's private range.
	if err := ping(b, s.a.hostIPs[0]); err == nil {
		t.Errorf("a host at site B pings %s at site A", s.a.hostIPs[0])
	}

	// Both reach the controller, which sees each come from its router.
	for _, st := range []*site{s.a, s.b} {
		if err := ping(st.hosts[0], controllerIP); err != nil {
			t.Errorf("site %s's host does not ping the controller: %v", st.name, err)
		}
		from, err := dialEcho(st.hosts[0], controllerIP+":7000")
		if err != nil {
			t.Errorf("site %s's host does not reach the controller: %v", st.name, err)
			continue
		}
		if !strings.HasPrefix(from, st.publicIP+":") {
			t.Errorf("the controller sees site %s's host come from %s, not from its router %s", st.name, from, st.publicIP)
		}
	}
}

// TestHostsJoinAcrossNAT: a controller on the public network, and a host
// at each site joins it through its router's NAT and is heard; each host
// reaches the controller's HTTP from its site.
func TestHostsJoinAcrossNAT(t *testing.T) {
	t.Parallel()
	s := newSites(t, 1)
	m := s.genesis()
	for _, st := range []*site{s.a, s.b} {
		if out, err := try(st.hosts[0], "curl", "-fsS", "--max-time", "5", "--cacert", m.rootPEM(), "https://"+controllerIP+":"+rigHTTP+"/healthz"); err != nil {
			t.Fatalf("site %s's host does not reach the controller's /healthz: %v: %s", st.name, err, out)
		}
	}
	m.join(s.a.hosts[0], "site-a", s.a.hostIPs[0])
	m.join(s.b.hosts[0], "site-b", s.b.hostIPs[0])

	poll.Until(t, 20*time.Second, "every node listed and heard", func() error {
		nodes := m.nodes()
		var got []string
		heard := 0
		for _, n := range nodes {
			got = append(got, fmt.Sprintf("%s@%s heard %v", n.Name, n.Address, n.LastHeard))
			if n.LastHeard != nil {
				heard++
			}
		}
		if len(nodes) == 3 && heard == 3 {
			return nil
		}
		return errors.New(strings.Join(got, ", "))
	})
	want := map[string]string{"ctl": controllerIP, "site-a": s.a.hostIPs[0], "site-b": s.b.hostIPs[0]}
	for _, n := range m.nodes() {
		if want[n.Name] != n.Address {
			t.Errorf("node %s has address %q, want %q", n.Name, n.Address, want[n.Name])
		}
	}
}

// TestSitesWithoutOverlayNamesDoNotReach is the request the overlay
// makes work, made without it: site B's host serves on its address, site
// A's resolver gives B's name that address (the one B reported, private
// to its site), and A cannot connect to it.
func TestSitesWithoutOverlayNamesDoNotReach(t *testing.T) {
	t.Parallel()
	s := newSites(t, 1)
	m := s.genesis()
	a, b := s.a.hosts[0], s.b.hosts[0]
	m.join(a, "site-a", s.a.hostIPs[0])
	m.join(b, "site-b", s.b.hostIPs[0])
	echo(t, b, s.b.hostIPs[0]+":7000")
	// A push sends every host the names: the nodes' among them.
	mustCLIIn(t, s.ctl, "push", "--dir", m.dir, "--wait", "1m")

	var ips []string
	poll.Until(t, 20*time.Second, "site-b.internal resolved at site A", func() (err error) {
		ips, err = resolve(a, rigDNS, "site-b.internal")
		if err == nil && len(ips) == 0 {
			err = fmt.Errorf("no address")
		}
		return err
	})
	if len(ips) != 1 || ips[0] != s.b.hostIPs[0] {
		t.Fatalf("site A resolves site-b.internal to %v, want [%s]", ips, s.b.hostIPs[0])
	}
	if from, err := dialEcho(a, ips[0]+":7000"); err == nil {
		t.Errorf("site A reached site-b.internal (%s) without the overlay, seen from %s", ips[0], from)
	}
	if _, err := dialEcho(b, ips[0]+":7000"); err != nil {
		t.Errorf("site B does not reach its own service: %v", err)
	}
}
