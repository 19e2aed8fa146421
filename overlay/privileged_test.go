package overlay

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// rootOptIn asks for the tests that need root and network namespaces. CI
// sets it, so they run there and fail rather than skip if they cannot.
const rootOptIn = "MESH_TEST_ROOT"

// needNamespaces skips t unless rootOptIn asks for it; asked for, it
// fails where it cannot run.
// kernelOptIn asks the tunnel test to hold that the kernel's WireGuard
// runs the interfaces: set it where the module exists (not here, not in
// CI: this kernel has none).
const kernelOptIn = "MESH_TEST_WGKERNEL"

func needNamespaces(t testing.TB) {
	t.Helper()
	if os.Getenv(rootOptIn) != "1" {
		t.Skipf("makes network namespaces and WireGuard interfaces: %s=1 runs it, as CI does", rootOptIn)
	}
	if os.Getuid() != 0 {
		t.Fatalf("%s=1 asks for the tests that need root: run them as root", rootOptIn)
	}
	for _, tool := range []string{"ip", "nsenter", "unshare", "wg", "ping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s=1 asks for the namespace tests, which need %s: %v", rootOptIn, tool, err)
		}
	}
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// site is two network namespaces joined by a veth pair, 192.168.77.1 and
// .2, removed when the test ends.
func twoNamespaces(t testing.TB) (a, b string) {
	t.Helper()
	var r [3]byte
	rand.Read(r[:])
	tag := hex.EncodeToString(r[:])
	a, b = "ova"+tag, "ovb"+tag
	for _, ns := range []string{a, b} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	run(t, "ip", "link", "add", "v"+a, "netns", a, "type", "veth", "peer", "name", "v"+b, "netns", b)
	for i, ns := range []string{a, b} {
		dev := "v" + ns
		run(t, "nsenter", "--net=/run/netns/"+ns, "ip", "addr", "add", fmt.Sprintf("192.168.77.%d/24", i+1), "dev", dev)
		run(t, "nsenter", "--net=/run/netns/"+ns, "ip", "link", "set", dev, "up")
		run(t, "nsenter", "--net=/run/netns/"+ns, "ip", "link", "set", "lo", "up")
	}
	return a, b
}

func newKey(t testing.TB) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestTunnelBetweenNamespaces: two Devices, each in its own namespace,
// reach each other over mesh0 (ping both ways, a TCP stream); adding a
// third peer keeps the stream flowing; wg show lists the peers; a peer
// removed no longer completes a handshake with its old key; a relay's
// forwarding rule is there until Down, which removes the interface.
func TestTunnelBetweenNamespaces(t *testing.T) {
	needNamespaces(t)
	nsA, nsB := twoNamespaces(t)
	ka, kb := newKey(t), newKey(t)
	a := startHelper(t, nsA, Config{PrivateKey: ka.String(), ListenPort: 51820, Address: prefix("10.88.0.1/16")})
	b := startHelper(t, nsB, Config{PrivateKey: kb.String(), ListenPort: 51821, Address: prefix("10.88.0.2/16")})
	if a.mode != spec.OverlayUserspace && a.mode != spec.OverlayKernel {
		t.Fatalf("mode %q", a.mode)
	}
	// The probe picks the kernel's WireGuard where the module is; this
	// machine's kernel has none, so CI runs the userspace path. On a
	// kernel with the module, MESH_TEST_WGKERNEL=1 holds that the probe
	// chose it and runs the same test over it.
	if os.Getenv(kernelOptIn) == "1" && (a.mode != spec.OverlayKernel || b.mode != spec.OverlayKernel) {
		t.Fatalf("%s=1: the interfaces run %s and %s, not the kernel's WireGuard (is the wireguard module loaded?)", kernelOptIn, a.mode, b.mode)
	}
	t.Logf("mode: %s", a.mode)
	peerA := Peer{Key: ka.PublicKey().String(), Endpoint: "192.168.77.1:51820", AllowedIPs: []netip.Prefix{prefix("10.88.0.1/32")}, Keepalive: spec.OverlayKeepalive}
	peerB := Peer{Key: kb.PublicKey().String(), Endpoint: "192.168.77.2:51821", AllowedIPs: []netip.Prefix{prefix("10.88.0.2/32")}, Keepalive: spec.OverlayKeepalive}
	a.do(command{Op: "set", Peers: []Peer{peerB}})
	b.do(command{Op: "set", Peers: []Peer{peerA}})

	ping := func(h *helper, to string) error {
		_, err := h.try(command{Op: "run", Args: []string{"ping", "-c", "1", "-W", "1", to}})
		return err
	}
	poll.Until(t, 20*time.Second, "a pings b over mesh0", func() error { return ping(a, "10.88.0.2") })
	if err := ping(b, "10.88.0.1"); err != nil {
		t.Fatalf("b pings a over mesh0: %v", err)
	}
	if a.handshake(peerB.Key).IsZero() || b.handshake(peerA.Key).IsZero() {
		t.Fatal("a ping went through with no handshake seen")
	}

	b.do(command{Op: "echo", Addr: "10.88.0.2:7000"})
	a.do(command{Op: "stream", Addr: "10.88.0.2:7000"})
	flowing := func(from int64) int64 {
		t.Helper()
		var now int64
		poll.Until(t, 20*time.Second, "the TCP stream over mesh0", func() error {
			s, err := a.try(command{Op: "streamed"})
			if err != nil {
				return err
			}
			if now = s.Bytes; now < from+64*1024 {
				return fmt.Errorf("%d bytes echoed, waiting for %d", now, from+64*1024)
			}
			return nil
		})
		return now
	}
	before := flowing(0)
	hsBefore := a.handshake(peerB.Key)
	third := Peer{Key: newKey(t).PublicKey().String(), Endpoint: "192.168.77.3:51820", AllowedIPs: []netip.Prefix{prefix("10.88.0.3/32")}, Keepalive: spec.OverlayKeepalive}
	a.do(command{Op: "set", Peers: []Peer{peerB, third}})
	flowing(before)
	if hs := a.handshake(peerB.Key); hs.Before(hsBefore) {
		t.Fatalf("b's handshake went back from %s to %s: its session was replaced", hsBefore, hs)
	}

	show := a.do(command{Op: "run", Args: []string{"wg", "show", spec.OverlayInterface}}).Out
	for _, k := range []string{peerB.Key, third.Key} {
		if !strings.Contains(show, k) {
			t.Fatalf("wg show %s does not list peer %s:\n%s", spec.OverlayInterface, k, show)
		}
	}

	// b removed from a; b starts afresh with a (no keys kept), so only a
	// new handshake could carry its traffic, and a no longer answers it.
	a.do(command{Op: "set", Peers: []Peer{third}})
	b.do(command{Op: "set", Peers: nil})
	b.do(command{Op: "set", Peers: []Peer{peerA}})
	if err := ping(b, "10.88.0.1"); err == nil {
		t.Fatal("b still reaches a after a removed it")
	}
	b.do(command{Op: "retry", Keys: []string{peerA.Key}})
	if _, err := b.try(command{Op: "run", Args: []string{"ping", "-c", "3", "-W", "2", "10.88.0.1"}}); err == nil {
		t.Fatal("b still reaches a after a removed it")
	}
	if hs := b.handshake(peerA.Key); !hs.IsZero() {
		t.Fatalf("b completed a handshake with a at %s after a removed it", hs)
	}
	if show := a.do(command{Op: "run", Args: []string{"wg", "show", spec.OverlayInterface, "peers"}}).Out; strings.Contains(show, peerB.Key) {
		t.Fatalf("wg show still lists the removed peer:\n%s", show)
	}

	// A relay forwards mesh0 to mesh0 for the range only, until Down.
	rule := "-A FORWARD -s 10.88.0.0/16 -d 10.88.0.0/16 -i mesh0 -o mesh0 -j ACCEPT"
	a.do(command{Op: "forward"})
	if rules := a.do(command{Op: "run", Args: []string{"iptables", "-w", "-S", "FORWARD"}}).Out; !strings.Contains(rules, rule) {
		t.Fatalf("no forwarding rule for the relay:\n%s", rules)
	}
	if f := a.do(command{Op: "run", Args: []string{"cat", "/proc/sys/net/ipv4/conf/mesh0/forwarding"}}).Out; strings.TrimSpace(f) != "1" {
		t.Fatalf("mesh0 does not forward: %q", f)
	}
	a.do(command{Op: "down"})
	if rules := a.do(command{Op: "run", Args: []string{"iptables", "-w", "-S", "FORWARD"}}).Out; strings.Contains(rules, "mesh0") {
		t.Fatalf("the relay's rule outlived Down:\n%s", rules)
	}
	if out, err := a.try(command{Op: "run", Args: []string{"ip", "link", "show", "mesh0"}}); err == nil {
		t.Fatalf("mesh0 outlived Down:\n%s", out.Out)
	}
}

// BenchmarkPeersMemory: the resident set of a process whose interface
// holds 100 peers, against the same with none.
func BenchmarkPeersMemory(b *testing.B) {
	needNamespaces(b)
	nsA, _ := twoNamespaces(b)
	h := startHelper(b, nsA, Config{PrivateKey: newKey(b).String(), Address: prefix("10.88.0.1/16")})
	none := h.do(command{Op: "memory"})
	var peers []Peer
	for i := range 100 {
		peers = append(peers, Peer{Key: newKey(b).PublicKey().String(), Endpoint: fmt.Sprintf("192.168.77.%d:51820", 10+i),
			AllowedIPs: []netip.Prefix{prefix(fmt.Sprintf("10.88.1.%d/32", i+1))}, Keepalive: spec.OverlayKeepalive})
	}
	b.ResetTimer()
	for range b.N {
		h.do(command{Op: "set", Peers: nil})
		h.do(command{Op: "set", Peers: peers})
	}
	b.StopTimer()
	hundred := h.do(command{Op: "memory"})
	b.ReportMetric(float64(none.RSS)/(1<<20), "MiB-rss-0-peers")
	b.ReportMetric(float64(hundred.RSS)/(1<<20), "MiB-rss-100-peers")
	b.ReportMetric(float64(hundred.HeapInUse)/(1<<20), "MiB-heap-100-peers")
}
