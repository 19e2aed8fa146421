package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// The sites rig: network namespaces laid out as machines at two sites
// behind NAT and a controller on the open internet. Every namespace is the
// test's own (a random suffix names them), so the addresses below are the
// same in every test and collide with nothing else, the machine's own
// networks included: nothing of the rig is in the root namespace, no
// interface, no route, no firewall rule.
//
//	public namespace: bridge br0 (the internet, publicNet)
//	  controller namespace: pub 198.18.0.2          (the relay)
//	  router A namespace:   pub 198.18.0.11, lan 192.168.10.1/24, MASQUERADE out pub
//	    host namespaces A1, A2: eth0 192.168.10.2, .3 on router A's br0, default via .1
//	  router B namespace:   pub 198.18.0.12, lan 192.168.20.1/24, MASQUERADE out pub
//	    host namespaces B1, B2: eth0 192.168.20.2, .3 on router B's br0, default via .1
//
// No namespace has a route to a site's private range but the site's own:
// a host at one site cannot reach a host at the other but through the
// overlay.

// controllerIP is the controller's public address, on the rig's
// internet, 198.18.0.0/24: a range reserved for benchmarks (RFC 2544),
// never a real network's.
const controllerIP = "198.18.0.2"

// sitesNS is where the namespaces' names are bound.
const sitesNS = "/run/netns"

// rootOptIn asks for the tests that need root: CI sets it, so they run
// there and fail rather than skip if they cannot.
const rootOptIn = "MESH_TEST_ROOT"

// needRoot skips t where it cannot run and was not asked for; where it
// was asked for (MESH_TEST_ROOT=1) and cannot run, it fails.
func needRoot(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(rootOptIn) != "1" {
		t.Skipf("%s needs root and namespaces: %s=1 runs it, as CI does", what, rootOptIn)
	}
	if os.Getuid() != 0 {
		t.Fatalf("%s needs root, and %s=1 asks for it: run the tests as root", what, rootOptIn)
	}
	for _, tool := range []string{"ip", "iptables", "nsenter", "unshare", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s needs %s (.ci/run installs it): %v", what, tool, err)
		}
	}
}

// site is a router namespace and the host namespaces behind it.
type site struct {
	name     string   // A or B
	router   string   // the router's namespace
	publicIP string   // the router's address on the public bridge: its hosts' traffic leaves from it
	lan      string   // the site's private range
	hosts    []string // the hosts' namespaces
	hostIPs  []string // their private addresses
}

// sites is one test's rig.
type sites struct {
	t      testing.TB
	prefix string // every namespace's name starts with it
	public string // the namespace of the public bridge
	ctl    string // the controller's namespace
	a, b   *site
	ports  int      // the public bridge's ports so far
	made   []string // the namespaces, in the order they were made
}

// newSites builds the rig with hostsPerSite hosts at each site (1 or 2),
// and removes it when the test ends. On failure it logs each namespace's
// addresses, routes and NAT rules.
func newSites(t testing.TB, hostsPerSite int) *sites {
	t.Helper()
	needRoot(t, "the sites rig")
	suffix := make([]byte, 3)
	rand.Read(suffix)
	s := &sites{t: t, prefix: "mesh-" + hex.EncodeToString(suffix) + "-"}
	s.public, s.ctl = s.prefix+"pub", s.prefix+"ctl"
	t.Cleanup(func() {
		if t.Failed() {
			s.dump(s.made)
		}
		for _, ns := range s.made {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		}
	})
	add, plug := s.add, s.plug
	add(s.public)
	s.ip("-n", s.public, "link", "add", "br0", "type", "bridge")
	s.ip("-n", s.public, "link", "set", "br0", "up")
	add(s.ctl)
	plug(s.ctl, controllerIP)

	mk := func(name string, n int, pubIP string) *site {
		st := &site{name: name, router: s.prefix + "r" + strings.ToLower(name), publicIP: pubIP, lan: fmt.Sprintf("192.168.%d0.0/24", n)}
		add(st.router)
		plug(st.router, pubIP)
		s.ip("-n", st.router, "link", "add", "br0", "type", "bridge")
		s.ip("-n", st.router, "addr", "add", fmt.Sprintf("192.168.%d0.1/24", n), "dev", "br0")
		s.ip("-n", st.router, "link", "set", "br0", "up")
		s.in(st.router, "sh", "-c", "echo 1 >/proc/sys/net/ipv4/ip_forward")
		s.in(st.router, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", st.lan, "-o", "pub", "-j", "MASQUERADE")
		for i := range hostsPerSite {
			ns := fmt.Sprintf("%s%s%d", s.prefix, strings.ToLower(name), i+1)
			ip := fmt.Sprintf("192.168.%d0.%d", n, i+2)
			add(ns)
			lp := fmt.Sprintf("h%d", i+1)
			s.ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", lp, "netns", st.router)
			s.ip("-n", st.router, "link", "set", lp, "master", "br0", "up")
			s.ip("-n", ns, "addr", "add", ip+"/24", "dev", "eth0")
			s.ip("-n", ns, "link", "set", "eth0", "up")
			s.ip("-n", ns, "route", "add", "default", "via", fmt.Sprintf("192.168.%d0.1", n))
			st.hosts, st.hostIPs = append(st.hosts, ns), append(st.hostIPs, ip)
		}
		return st
	}
	s.a = mk("A", 1, "198.18.0.11")
	s.b = mk("B", 2, "198.18.0.12")
	return s
}

// add makes namespace ns, its loopback up, and removes it when the test
// ends.
func (s *sites) add(ns string) {
	s.t.Helper()
	s.ip("netns", "add", ns)
	s.made = append(s.made, ns)
	s.ip("-n", ns, "link", "set", "lo", "up")
}

// plug puts namespace ns on the public bridge as interface pub with
// address ip.
func (s *sites) plug(ns, ip string) {
	s.t.Helper()
	s.ports++
	bp := fmt.Sprintf("p%d", s.ports)
	s.ip("-n", ns, "link", "add", "pub", "type", "veth", "peer", "name", bp, "netns", s.public)
	s.ip("-n", s.public, "link", "set", bp, "master", "br0", "up")
	s.ip("-n", ns, "addr", "add", ip+"/24", "dev", "pub")
	s.ip("-n", ns, "link", "set", "pub", "up")
}

// ip runs ip(8) with args, which must succeed.
func (s *sites) ip(args ...string) {
	s.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		s.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// command is args run in namespace ns's network (nsenter, which unlike
// ip netns exec leaves /sys as it is).
func command(ns string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + filepath.Join(sitesNS, ns), "--"}, args...)...)
}

// in runs args in namespace ns, which must succeed, and returns its output.
func (s *sites) in(ns string, args ...string) string {
	s.t.Helper()
	out, err := command(ns, args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("in %s: %s: %v: %s", ns, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// try runs args in namespace ns and returns its output and error.
func try(ns string, args ...string) (string, error) {
	out, err := command(ns, args...).CombinedOutput()
	return string(out), err
}

// dump logs what each namespace holds, for a failed test.
func (s *sites) dump(namespaces []string) {
	for _, ns := range namespaces {
		var b strings.Builder
		for _, args := range [][]string{{"ip", "-br", "addr"}, {"ip", "route"}, {"iptables", "-t", "nat", "-S", "POSTROUTING"}} {
			out, _ := try(ns, args...)
			fmt.Fprintf(&b, "$ %s\n%s", strings.Join(args, " "), out)
		}
		s.t.Logf("namespace %s:\n%s", ns, b.String())
	}
}

// meshIn runs the mesh binary in namespace ns until the test ends, in a
// mount namespace of its own with a tmpfs on /run/wireguard: every host
// names its overlay interface mesh0, and a userspace WireGuard keeps its
// control socket there by that name. The process is the binary itself
// (nsenter, unshare and sh exec it), so /proc/PID/ns/mnt is its mount
// namespace. Its output is logged if the test failed.
func meshIn(t testing.TB, ns string, args ...string) *daemon {
	t.Helper()
	wrap := []string{"unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mkdir -p /run/wireguard && mount -t tmpfs tmpfs /run/wireguard && exec "$@"`, "sh", meshBin}
	d := &daemon{cmd: command(ns, append(wrap, args...)...), out: &syncBuffer{}, done: make(chan error, 1)}
	d.cmd.Env = meshEnv
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("in %s: mesh %s output:\n%s", ns, strings.Join(args, " "), d.out.String())
		}
	})
	return d
}

// cliIn runs the mesh CLI in namespace ns (the controller's address is
// reachable only from the rig's namespaces) and returns its stdout, stderr
// and exit code.
func cliIn(t testing.TB, ns string, args ...string) (string, string, int) {
	t.Helper()
	cmd := command(ns, append([]string{meshBin}, args...)...)
	cmd.Env = meshEnv
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// mustCLIIn is cliIn, which must exit 0; it returns stdout.
func mustCLIIn(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, errOut, code := cliIn(t, ns, args...)
	if code != 0 {
		t.Fatalf("in %s: mesh %s: exit %d: %s", ns, strings.Join(args, " "), code, errOut)
	}
	return out
}

// sitesMesh is a mesh whose controller runs in the rig's controller
// namespace.
type sitesMesh struct {
	s   *sites
	dir string
	d   *daemon
}

// Ports the rig's daemons listen on: each namespace is a machine of its
// own, so every one takes the same.
const (
	rigBus  = "4222"
	rigHTTP = "8480"
	rigDNS  = "127.0.0.1:53"
)

// genesis starts a mesh "test" whose own node is ctl in the controller's
// namespace, its bus and HTTP on the public address (which the join
// tokens carry: hosts at the sites dial it through their NAT); extra
// flags come last. It returns once /healthz answers.
func (s *sites) genesis(extra ...string) *sitesMesh {
	s.t.Helper()
	dir := filepath.Join(s.t.TempDir(), "ctl")
	args := append([]string{"genesis", "--dir", dir, "--mesh", "test", "--node", "ctl",
		"--bus", controllerIP + ":" + rigBus, "--http", controllerIP + ":" + rigHTTP,
		"--address", controllerIP, "--advertise", controllerIP,
		"--dns", rigDNS, "--dns-upstream", deadUpstream, "--heartbeat", "500ms"}, noEngine(extra)...)
	m := &sitesMesh{s: s, dir: dir, d: meshIn(s.t, s.ctl, args...)}
	poll.Until(s.t, 30*time.Second, "the controller's /healthz", func() error {
		m.d.alive(s.t)
		// Off loopback the listener serves TLS under the mesh's root.
		_, err := try(s.ctl, "curl", "-fsS", "--max-time", "2", "--cacert", m.rootPEM(), "https://"+controllerIP+":"+rigHTTP+"/healthz")
		return err
	})
	return m
}

// rootPEM is the file of the mesh's root certificate, which the HTTP
// listener's certificate chains to.
func (m *sitesMesh) rootPEM() string { return filepath.Join(m.dir, "controller", "ca", "root.crt") }

// token is a join token for node.
func (m *sitesMesh) token(node string) string {
	m.s.t.Helper()
	return strings.TrimSpace(mustCLIIn(m.s.t, m.s.ctl, "token", "create", "--dir", m.dir, node))
}

// join runs a host in namespace ns that joins m as node, its address
// addr, and waits until the controller has heard it. It returns the
// host's state directory and process.
func (m *sitesMesh) join(ns, node, addr string, extra ...string) (string, *daemon) {
	m.s.t.Helper()
	t := m.s.t
	dir := filepath.Join(t.TempDir(), node)
	d := meshIn(t, ns, append([]string{"host", "--dir", dir, "--join", m.token(node), "--address", addr,
		"--heartbeat", "500ms", "--dns", rigDNS, "--dns-upstream", deadUpstream}, noEngine(extra)...)...)
	poll.Until(t, 30*time.Second, node+" running", func() error {
		d.alive(t)
		_, err := os.Stat(filepath.Join(dir, "addrs.json"))
		return err
	})
	poll.Until(t, 20*time.Second, node+" heard", func() error {
		return m.heard(node)
	})
	return dir, d
}

// nodes is what mesh node list --json says, run in the controller's
// namespace.
func (m *sitesMesh) nodes() []spec.Node {
	m.s.t.Helper()
	out := mustCLIIn(m.s.t, m.s.ctl, "node", "list", "--dir", m.dir, "--json")
	var nodes []spec.Node
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		m.s.t.Fatalf("mesh node list --json: %v: %s", err, out)
	}
	return nodes
}

// heard is nil once node is listed and was heard, else an error saying
// why not.
func (m *sitesMesh) heard(node string) error {
	for _, n := range m.nodes() {
		if n.Name == node {
			if n.LastHeard != nil {
				return nil
			}
			return fmt.Errorf("%s not heard yet", node)
		}
	}
	return errors.New(node + " not listed")
}

// inNS runs f on a thread in namespace ns's network. A socket keeps the
// namespace it was made in: a listener made by f serves there, and a
// connection dialled by f goes from there, whichever goroutine uses them
// afterwards. The thread is left locked, so it ends with f's goroutine
// rather than serving another in the wrong namespace.
func inNS(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(filepath.Join(sitesNS, ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open namespace %s: %w", ns, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter namespace %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// echo serves on addr in namespace ns until the test ends: to each
// connection it writes the address it came from, then echoes what it
// reads.
func echo(t testing.TB, ns, addr string) {
	t.Helper()
	if err := serveEcho(t, ns, addr); err != nil {
		t.Fatal(err)
	}
}

// serveEcho is echo, failing with an error rather than the test: for an
// address that is not up yet.
func serveEcho(t testing.TB, ns, addr string) error {
	var l net.Listener
	if err := inNS(ns, func() (err error) {
		l, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		return fmt.Errorf("listen on %s in %s: %w", addr, ns, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintln(c, c.RemoteAddr())
				io.Copy(c, c)
			}()
		}
	}()
	return nil
}

// dialEcho connects from namespace ns to an echo at addr, has one line
// echoed, and returns the address the echo saw the connection come from.
func dialEcho(ns, addr string) (string, error) {
	c, err := dialIn(ns, addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	from, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("read the echo's greeting: %w", err)
	}
	if _, err := fmt.Fprintln(c, "ping"); err != nil {
		return "", fmt.Errorf("write to the echo: %w", err)
	}
	back, err := r.ReadString('\n')
	if err != nil || back != "ping\n" {
		return "", fmt.Errorf("the echo answered %q: %v", back, err)
	}
	return strings.TrimSpace(from), nil
}

// resolve asks the resolver at addr, from namespace ns, for name's
// IPv4 addresses.
func resolve(ns, addr, name string) ([]string, error) {
	var c net.Conn
	if err := inNS(ns, func() (err error) {
		c, err = net.DialTimeout("udp", addr, 2*time.Second)
		return err
	}); err != nil {
		return nil, err
	}
	conn := &dns.Conn{Conn: c}
	defer conn.Close()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 2 * time.Second}).ExchangeWithConn(q, conn)
	if err != nil {
		return nil, fmt.Errorf("ask %s for %s: %w", addr, name, err)
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s answers %s for %s", addr, dns.RcodeToString[r.Rcode], name)
	}
	var ips []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			ips = append(ips, a.A.String())
		}
	}
	return ips, nil
}

// dialIn connects from namespace ns to addr over TCP, giving up after
// 3 s.
func dialIn(ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNS(ns, func() (err error) {
		d := net.Dialer{Timeout: 3 * time.Second}
		c, err = d.DialContext(context.Background(), "tcp", addr)
		return err
	})
	return c, err
}

// ping is nil when one ICMP echo from namespace ns to ip is answered
// within a second, else an error with what ping said.
func ping(ns, ip string) error {
	if out, err := try(ns, "ping", "-n", "-c", "1", "-W", "1", ip); err != nil {
		return fmt.Errorf("ping %s from %s: %w\n%s", ip, ns, err, out)
	}
	return nil
}
