package host_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
)

// runResolver runs a resolver on 127.0.0.1:0 that never forwards, serving
// zone, until the test ends.
func runResolver(t *testing.T, zone resolver.Zone) *resolver.Server {
	t.Helper()
	s, err := resolver.New(resolver.Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:9"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.SetZone(zone)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("resolver Run: %v", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("resolver Run: %v", err)
	}
	return s
}

// askUDP sends one query for name over UDP to addr, from loopback (a
// packet from the gateway's own address to it is masqueraded by the
// engine's rules), and returns the answer or the error the socket gave
// (connection refused: nothing listens there).
func askUDP(t *testing.T, addr, name string) (*dns.Msg, error) {
	t.Helper()
	c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	b, _ := q.Pack()
	if _, err := c.Write(b); err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		t.Fatal(err)
	}
	return r, nil
}

// TestNetworkRemovalStopsNames: the node's network applied has the
// machine's resolver answer on its gateway; the network removed, the
// resolver lets the gateway go, so when a network is made again on that
// subnet (here by an engine with no resolver) nothing answers there.
func TestNetworkRemovalStopsNames(t *testing.T) {
	t.Parallel()
	r := newEngineRig(t)
	ctx := context.Background()
	names := runResolver(t, resolver.Zone{Names: map[string][]netip.Addr{"alpha.internal": {netip.MustParseAddr("10.0.0.1")}}})
	e := host.NewEngine(host.Services{Root: r.root, Blobs: r.blobs, Docker: r.docker, Node: r.node, Address: "127.0.0.1", Subnet: r.subnet, Names: names})
	gw := netip.AddrPortFrom(host.Gateway(r.subnet), 53).String()

	declared := []spec.Resource{r.network()}
	results, record, _ := e.Apply(ctx, declared, nil)
	checkOutcomes(t, results, allOutcome(declared, spec.Created))
	if !slices.Contains(names.Addrs(), gw) {
		t.Fatalf("resolver addresses %v, want the gateway %s", names.Addrs(), gw)
	}
	if a, err := askUDP(t, gw, "alpha.internal"); err != nil || a.Rcode != dns.RcodeSuccess || len(a.Answer) != 1 {
		t.Fatalf("alpha.internal at the gateway %s: %v %v", gw, a, err)
	}

	results, record, _ = e.Apply(ctx, nil, record)
	checkOutcomes(t, results, allOutcome(declared, spec.Removed))
	if len(record) != 0 {
		t.Fatalf("record after removal: %+v", record)
	}
	if slices.Contains(names.Addrs(), gw) {
		t.Errorf("resolver addresses after the network was removed: %v, still the gateway %s", names.Addrs(), gw)
	}

	// The gateway's address back on the machine (a network made on the
	// same subnet by an engine that serves no names): nothing answers it.
	bare := host.NewEngine(host.Services{Root: r.root, Blobs: r.blobs, Docker: r.docker, Node: r.node, Address: "127.0.0.1", Subnet: r.subnet})
	results, _, _ = bare.Apply(ctx, declared, nil)
	checkOutcomes(t, results, allOutcome(declared, spec.Created))
	if a, err := askUDP(t, gw, "alpha.internal"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the gateway %s after the network was removed and made again: %v %v, want connection refused (nothing listening)", gw, a, err)
	}
}
