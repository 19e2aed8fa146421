package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// The overlay's tests on the sites rig: hosts at two sites behind NAT
// reach each other over mesh0 through the controller, which relays. They
// use the overlay's command line and JSON alone (mesh genesis --overlay,
// mesh overlay show --json, mesh node show --json, wg show), decoded into
// the structs below, and hold nothing of its Go code.

// overlayCIDR is the overlay's range in these tests.
const overlayCIDR = "10.88.0.0/16"

// overlayMember is a member as mesh overlay show --json prints it.
type overlayMember struct {
	Node      string   `json:"node"`
	Name      string   `json:"name"`
	Key       string   `json:"wg_key"`
	IP        string   `json:"overlay_ip"`
	Endpoints []string `json:"endpoints"`
	Relay     bool     `json:"relay"`
}

// name is the member's node, under either key.
func (o overlayMember) name() string {
	if o.Node != "" {
		return o.Node
	}
	return o.Name
}

// publicMachine adds a machine on the public network (a relay apart from
// the controller), reachable by everyone at ip, and returns its namespace.
func (s *sites) publicMachine(name, ip string) string {
	s.t.Helper()
	ns := s.prefix + name
	s.add(ns)
	s.plug(ns, ip)
	return ns
}

// overlayGenesis starts genesis with the overlay on, its node the relay
// and reachable at its public address.
func (s *sites) overlayGenesis(extra ...string) *sitesMesh {
	s.t.Helper()
	return s.genesis(append([]string{"--overlay", overlayCIDR, "--relay", "--endpoint", controllerIP + ":51820"}, extra...)...)
}

// members is what mesh overlay show --json says, by node: a list of
// members, or an object holding them under "members".
func (m *sitesMesh) members() map[string]overlayMember {
	m.s.t.Helper()
	out := mustCLIIn(m.s.t, m.s.ctl, "overlay", "show", "--dir", m.dir, "--json")
	var list []overlayMember
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		var obj struct {
			CIDR    string          `json:"cidr"`
			Members []overlayMember `json:"members"`
		}
		if err := json.Unmarshal([]byte(out), &obj); err != nil {
			m.s.t.Fatalf("mesh overlay show --json: %v: %s", err, out)
		}
		list = obj.Members
	}
	by := map[string]overlayMember{}
	for _, o := range list {
		by[o.name()] = o
	}
	return by
}

// waitMembers waits until overlay show lists exactly nodes, each with a
// valid key and its own address in the range, and returns them.
func (m *sitesMesh) waitMembers(nodes ...string) map[string]overlayMember {
	m.s.t.Helper()
	var by map[string]overlayMember
	cidr := netip.MustParsePrefix(overlayCIDR)
	poll.Until(m.s.t, 30*time.Second, "the overlay's members", func() error {
		by = m.members()
		if len(by) != len(nodes) {
			return fmt.Errorf("%d members: %+v", len(by), by)
		}
		seen := map[string]bool{}
		for _, n := range nodes {
			o, ok := by[n]
			if !ok {
				return errors.New(n + " is not a member")
			}
			ip, err := netip.ParseAddr(o.IP)
			if spec.CheckWGKey(o.Key) != nil || err != nil || !cidr.Contains(ip) || seen[o.IP] {
				return fmt.Errorf("%s: %+v", n, o)
			}
			if len(o.Endpoints) == 0 {
				return errors.New(n + " has reported no endpoints yet")
			}
			seen[o.IP] = true
		}
		return nil
	})
	return by
}

// wgPeer is a peer as wg show mesh0 dump prints it.
type wgPeer struct {
	Key        string
	Endpoint   string
	AllowedIPs []string
	Handshake  time.Time // zero: none
}

// wgIface is what wg show mesh0 dump prints.
type wgIface struct {
	Key   string // public
	Port  int
	Peers map[string]wgPeer // by key
}

// wgShow runs wg show mesh0 dump in namespace ns, in the mount namespace
// of d's process (where its /run/wireguard is).
func wgShow(ns string, d *daemon) (wgIface, error) {
	cmd := exec.Command("nsenter", "--net="+filepath.Join(sitesNS, ns),
		"--mount=/proc/"+strconv.Itoa(d.cmd.Process.Pid)+"/ns/mnt", "--", "wg", "show", spec.OverlayInterface, "dump")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return wgIface{}, fmt.Errorf("wg show in %s: %w: %s", ns, err, stderr.String())
	}
	w := wgIface{Peers: map[string]wgPeer{}}
	sc := bufio.NewScanner(&stdout)
	for first := true; sc.Scan(); first = false {
		f := strings.Split(sc.Text(), "\t")
		if first {
			if len(f) < 3 {
				return w, fmt.Errorf("wg show in %s: interface line %q", ns, sc.Text())
			}
			w.Key = f[1]
			w.Port, _ = strconv.Atoi(f[2])
			continue
		}
		if len(f) < 5 {
			return w, fmt.Errorf("wg show in %s: peer line %q", ns, sc.Text())
		}
		p := wgPeer{Key: f[0], Endpoint: f[2]}
		if f[3] != "(none)" {
			p.AllowedIPs = strings.Split(f[3], ",")
		}
		if sec, _ := strconv.ParseInt(f[4], 10, 64); sec > 0 {
			p.Handshake = time.Unix(sec, 0)
		}
		w.Peers[p.Key] = p
	}
	return w, nil
}

// overlayAddr is mesh0's IPv4 address in namespace ns, if it is up.
func overlayAddr(ns string) (string, error) {
	out, err := exec.Command("ip", "-n", ns, "-4", "-o", "addr", "show", "dev", spec.OverlayInterface).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("no %s in %s: %v: %s", spec.OverlayInterface, ns, err, out)
	}
	f := strings.Fields(string(out))
	if i := slices.Index(f, "inet"); i >= 0 && i+1 < len(f) {
		ip, _, _ := strings.Cut(f[i+1], "/")
		return ip, nil
	}
	return "", fmt.Errorf("%s in %s has no IPv4 address: %s", spec.OverlayInterface, ns, out)
}

// waitOverlayAddr waits until mesh0 in ns has address ip.
func waitOverlayAddr(t testing.TB, ns, ip string) {
	t.Helper()
	poll.Until(t, 30*time.Second, spec.OverlayInterface+" up with "+ip+" in "+ns, func() error {
		got, err := overlayAddr(ns)
		if err == nil && got != ip {
			err = fmt.Errorf("%s has %s", spec.OverlayInterface, got)
		}
		return err
	})
}

// serveOnOverlay serves an echo on ip:7000 in ns once the address is up.
func serveOnOverlay(t testing.TB, ns, ip string) string {
	t.Helper()
	addr := ip + ":7000"
	poll.Until(t, 30*time.Second, "an echo on "+addr+" in "+ns, func() error { return serveEcho(t, ns, addr) })
	return addr
}

// resolvesTo waits until ns's resolver gives name the address ip.
func resolvesTo(t testing.TB, ns, name, ip string) {
	t.Helper()
	poll.Until(t, 30*time.Second, name+" resolved to "+ip+" in "+ns, func() error {
		ips, err := resolve(ns, rigDNS, name)
		if err == nil && !slices.Equal(ips, []string{ip}) {
			err = fmt.Errorf("%s is %v", name, ips)
		}
		return err
	})
}

// reaches waits until from reaches the echo at addr, seen there as
// coming from fromIP, and returns how long it took.
func reaches(t testing.TB, ns, addr, fromIP string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	poll.Until(t, within, ns+" reaching "+addr, func() error {
		seen, err := dialEcho(ns, addr)
		if err == nil && !strings.HasPrefix(seen, fromIP+":") {
			err = fmt.Errorf("seen from %s, not %s", seen, fromIP)
		}
		return err
	})
	return time.Since(start)
}

// nodeOverlay is the overlay state mesh node show --json gives a node.
func (m *sitesMesh) nodeOverlay(node string) *spec.OverlayState {
	m.s.t.Helper()
	out := mustCLIIn(m.s.t, m.s.ctl, "node", "show", "--dir", m.dir, "--json", node)
	var n struct {
		Overlay *spec.OverlayState `json:"overlay"`
	}
	if err := json.Unmarshal([]byte(out), &n); err != nil {
		m.s.t.Fatalf("mesh node show --json %s: %v: %s", node, err, out)
	}
	return n.Overlay
}

// TestOverlayReachesAcrossSites: a host at site A reaches a service on a
// host at site B by B's mesh name, over the overlay through the
// controller's relay (neither site can reach the other), and the service
// sees A's overlay address. The same request without the overlay fails
// (TestSitesWithoutOverlayNamesDoNotReach).
func TestOverlayReachesAcrossSites(t *testing.T) {
	t.Parallel()
	s := newSites(t, 1)
	m := s.overlayGenesis()
	a, b := s.a.hosts[0], s.b.hosts[0]
	m.join(a, "site-a", s.a.hostIPs[0])
	_, bd := m.join(b, "site-b", s.b.hostIPs[0])
	by := m.waitMembers("ctl", "site-a", "site-b")
	if !by["ctl"].Relay || by["site-a"].Relay || by["site-b"].Relay {
		t.Errorf("relays: %+v, want ctl alone", by)
	}
	if len(by["ctl"].Endpoints) == 0 || by["ctl"].Endpoints[0] != controllerIP+":51820" {
		t.Errorf("ctl's endpoints %v, want %s:51820 first", by["ctl"].Endpoints, controllerIP)
	}
	aIP, bIP := by["site-a"].IP, by["site-b"].IP
	waitOverlayAddr(t, a, aIP)
	waitOverlayAddr(t, b, bIP)
	// Every name of the mesh resolves to overlay addresses on every host.
	resolvesTo(t, a, "site-b.internal", bIP)
	resolvesTo(t, b, "site-a.internal", aIP)
	resolvesTo(t, a, "ctl.internal", by["ctl"].IP)

	svc := serveOnOverlay(t, b, bIP)
	ips, err := resolve(a, rigDNS, "site-b.internal")
	if err != nil || len(ips) != 1 {
		t.Fatalf("site-b.internal at site A: %v %v", ips, err)
	}
	took := reaches(t, a, ips[0]+":7000", aIP, 60*time.Second)
	t.Logf("site A reached %s (site-b.internal) over the overlay %s after its address was up", svc, took)

	// B's key is on A's mesh0 without a direct path: the relay's peer
	// carries B's address; and the controller says so.
	w, err := wgShow(b, bd)
	if err != nil {
		t.Fatal(err)
	}
	if w.Key != by["site-b"].Key {
		t.Errorf("site-b's mesh0 key %s, the roster's %s", w.Key, by["site-b"].Key)
	}
	poll.Until(t, 30*time.Second, "site-a's path to site-b through ctl", func() error {
		st := m.nodeOverlay("site-a")
		if st == nil {
			return errors.New("no overlay state")
		}
		if st.Mode != spec.OverlayUserspace {
			return errors.New("mode " + st.Mode)
		}
		for _, p := range st.Peers {
			if p.Node == "site-b" {
				if p.Via == "ctl" && !p.Handshake.IsZero() {
					return nil
				}
				return fmt.Errorf("%+v", p)
			}
		}
		return fmt.Errorf("site-b is not among %+v", st.Peers)
	})
}

// TestOverlayRemovedNodeLeavesPeers: a node removed is gone from every
// peer list within one roster message (the coalescing second and an
// apply), its interface goes with it, and every other session stays.
// Its old key completes no handshake: no host holds it as a peer, and
// WireGuard answers no initiation from a key it does not hold.
func TestOverlayRemovedNodeLeavesPeers(t *testing.T) {
	t.Parallel()
	s := newSites(t, 2)
	m := s.overlayGenesis()
	_, a1 := m.join(s.a.hosts[0], "site-a1", s.a.hostIPs[0])
	_, a2 := m.join(s.a.hosts[1], "site-a2", s.a.hostIPs[1])
	bDir, bd := m.join(s.b.hosts[0], "site-b", s.b.hostIPs[0])
	by := m.waitMembers("ctl", "site-a1", "site-a2", "site-b")
	gone := by["site-b"].Key
	holders := map[string]*daemon{s.ctl: m.d, s.a.hosts[0]: a1, s.a.hosts[1]: a2}
	before := map[string]wgIface{}
	for ns, d := range holders {
		poll.Until(t, 60*time.Second, "every peer on "+ns+" with a handshake", func() error {
			w, err := wgShow(ns, d)
			if err != nil {
				return err
			}
			before[ns] = w
			if len(w.Peers) != 3 {
				return fmt.Errorf("%d peers", len(w.Peers))
			}
			for _, p := range w.Peers {
				if p.Handshake.IsZero() && p.Key == by["ctl"].Key {
					return fmt.Errorf("no handshake with the relay yet")
				}
			}
			return nil
		})
	}

	mustCLIIn(t, s.ctl, "node", "remove", "--dir", m.dir, "site-b")
	removed := time.Now()
	for ns, d := range holders {
		poll.Until(t, 5*time.Second, "site-b's key gone from "+ns, func() error {
			w, err := wgShow(ns, d)
			if err != nil {
				return err
			}
			if _, ok := w.Peers[gone]; ok {
				return fmt.Errorf("site-b's key %s is still a peer", gone)
			}
			if len(w.Peers) != 2 {
				return fmt.Errorf("%d peers, want 2", len(w.Peers))
			}
			// The others' sessions were not touched: each handshake kept.
			for key, p := range w.Peers {
				if was := before[ns].Peers[key]; !was.Handshake.IsZero() && p.Handshake.Before(was.Handshake) {
					return fmt.Errorf("peer %s lost its handshake of %s", key, was.Handshake)
				}
			}
			return nil
		})
	}
	t.Logf("site-b gone from every peer list %s after its removal", time.Since(removed).Round(time.Millisecond))
	if _, ok := m.members()["site-b"]; ok {
		t.Error("overlay show still lists site-b")
	}
	// The removed host exits and takes mesh0 and its key with it.
	bd.exited(t, 30*time.Second)
	poll.Until(t, 10*time.Second, "mesh0 gone at site B", func() error {
		_, err := overlayAddr(s.b.hosts[0])
		if err != nil {
			return nil
		}
		return errors.New("mesh0 still up")
	})
	if _, err := os.Stat(filepath.Join(bDir, "host", "wg.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the removed node's wireguard key is still in its directory (%v)", err)
	}

	// Joined again (a new directory), it is a new member: a new key, and
	// an address the removed one never had, held by no host as another's.
	m.join(s.b.hosts[0], "site-b", s.b.hostIPs[0])
	again := m.waitMembers("ctl", "site-a1", "site-a2", "site-b")["site-b"]
	if again.Key == gone || again.IP == by["site-b"].IP {
		t.Errorf("site-b joined again with key %s and address %s; the removed one had %s and %s", again.Key, again.IP, gone, by["site-b"].IP)
	}
	poll.Until(t, 30*time.Second, "site-b joined again, reached from site A over mesh0", func() error {
		return ping(s.a.hosts[0], again.IP)
	})
}

// TestOverlayHostRestartKeepsAddressAndKey: a host stopped and started
// again with no flags brings mesh0 back with the same address and key,
// and its sessions back.
func TestOverlayHostRestartKeepsAddressAndKey(t *testing.T) {
	t.Parallel()
	s := newSites(t, 1)
	m := s.overlayGenesis()
	a := s.a.hosts[0]
	dir, d := m.join(a, "site-a", s.a.hostIPs[0])
	by := m.waitMembers("ctl", "site-a")
	waitOverlayAddr(t, a, by["site-a"].IP)
	w, err := wgShow(a, d)
	if err != nil {
		t.Fatal(err)
	}
	if w.Key != by["site-a"].Key {
		t.Fatalf("mesh0's key %s, the roster's %s", w.Key, by["site-a"].Key)
	}
	key, err := os.ReadFile(filepath.Join(dir, "host", "wg.key"))
	if err != nil {
		t.Fatal(err)
	}

	d.stop(t)
	restarted := time.Now()
	d = meshIn(t, a, "host", "--dir", dir)
	waitOverlayAddr(t, a, by["site-a"].IP)
	poll.Until(t, 30*time.Second, "mesh0 back with its key and a handshake with the relay", func() error {
		w, err := wgShow(a, d)
		if err != nil {
			return err
		}
		if w.Key != by["site-a"].Key {
			return fmt.Errorf("mesh0's key %s, was %s", w.Key, by["site-a"].Key)
		}
		if p, ok := w.Peers[by["ctl"].Key]; !ok || !p.Handshake.After(restarted.Add(-time.Second)) {
			return fmt.Errorf("the relay's peer: %+v", p)
		}
		return nil
	})
	if again, err := os.ReadFile(filepath.Join(dir, "host", "wg.key")); err != nil || !bytes.Equal(again, key) {
		t.Errorf("wg.key changed across the restart (%v)", err)
	}
	if got := m.members()["site-a"]; got.Key != by["site-a"].Key || got.IP != by["site-a"].IP {
		t.Errorf("site-a's member after the restart %+v, was %+v", got, by["site-a"])
	}
}

// TestOverlayMembershipChangeKeepsTCP: a TCP connection across the sites
// carries traffic without a break while a host joins and is removed (two
// roster messages changing every host's peers).
func TestOverlayMembershipChangeKeepsTCP(t *testing.T) {
	t.Parallel()
	s := newSites(t, 2)
	m := s.overlayGenesis()
	a, b := s.a.hosts[0], s.b.hosts[0]
	m.join(a, "site-a", s.a.hostIPs[0])
	m.join(b, "site-b", s.b.hostIPs[0])
	by := m.waitMembers("ctl", "site-a", "site-b")
	svc := serveOnOverlay(t, b, by["site-b"].IP)
	reaches(t, a, svc, by["site-a"].IP, 60*time.Second)

	c, err := dialIn(a, svc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error, 1)
	var sent atomic.Int64
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- nil
				return
			case <-tick.C:
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			n := sent.Load()
			line := fmt.Sprintf("%d %s\n", n, strings.Repeat("x", 1000))
			if _, err := c.Write([]byte(line)); err != nil {
				done <- fmt.Errorf("write %d: %w", n, err)
				return
			}
			if back, err := r.ReadString('\n'); err != nil || back != line {
				done <- fmt.Errorf("echo %d: %v", n, err)
				return
			}
			sent.Add(1)
		}
	}()

	m.join(s.a.hosts[1], "site-a2", s.a.hostIPs[1])
	m.waitMembers("ctl", "site-a", "site-b", "site-a2")
	mustCLIIn(t, s.ctl, "node", "remove", "--dir", m.dir, "site-a2")
	m.waitMembers("ctl", "site-a", "site-b")
	// A hundred lines more (5 s at a line every 50 ms): both roster
	// messages applied everywhere meanwhile.
	after := sent.Load()
	poll.Until(t, 30*time.Second, "traffic after the changes", func() error {
		select {
		case err := <-done:
			done <- err
			return nil
		default:
		}
		n := sent.Load()
		if n >= after+100 {
			return nil
		}
		return fmt.Errorf("%d lines", n)
	})
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("the connection broke across the membership changes: %v", err)
	}
	t.Logf("%d lines echoed across two membership changes", sent.Load())
}

// TestOverlayEnableOnExistingMesh: mesh overlay enable on a mesh that
// runs brings mesh0 up on every host and moves the names onto it; mesh
// overlay disable takes it down and the names back to the hosts'
// addresses.
func TestOverlayEnableOnExistingMesh(t *testing.T) {
	t.Parallel()
	s := newSites(t, 1)
	m := s.genesis("--relay", "--endpoint", controllerIP+":51820")
	a, b := s.a.hosts[0], s.b.hosts[0]
	m.join(a, "site-a", s.a.hostIPs[0])
	m.join(b, "site-b", s.b.hostIPs[0])
	if _, err := overlayAddr(a); err == nil {
		t.Fatal("mesh0 is up at site A before the overlay is enabled")
	}

	mustCLIIn(t, s.ctl, "overlay", "enable", "--dir", m.dir, overlayCIDR)
	by := m.waitMembers("ctl", "site-a", "site-b")
	waitOverlayAddr(t, a, by["site-a"].IP)
	waitOverlayAddr(t, b, by["site-b"].IP)
	resolvesTo(t, a, "site-b.internal", by["site-b"].IP)
	svc := serveOnOverlay(t, b, by["site-b"].IP)
	reaches(t, a, svc, by["site-a"].IP, 60*time.Second)

	mustCLIIn(t, s.ctl, "overlay", "disable", "--dir", m.dir)
	for _, ns := range []string{a, b} {
		poll.Until(t, 10*time.Second, "mesh0 gone in "+ns, func() error {
			_, err := overlayAddr(ns)
			if err != nil {
				return nil
			}
			return errors.New("mesh0 still up")
		})
	}
	resolvesTo(t, a, "site-b.internal", s.b.hostIPs[0])
}
