package daemon

import (
	"net"

	"github.com/mesh-fleet/mesh/spec"
)

// busNames are the DNS names the bus's certificate carries: only the one
// every client verifies (spec.BusTLSName), which the CA's name constraints
// permit (mesh.MeshDomains); its addresses are IP SANs, which no
// constraint limits.
func busNames() []string { return []string{spec.BusTLSName} }

// busIPs are the addresses the bus's certificate names: the listen address,
// or every address of the machine when it listens on all.
func busIPs(listenHost string) []net.IP {
	ip := net.ParseIP(listenHost)
	if ip != nil && !ip.IsUnspecified() {
		return []net.IP{ip}
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

// Dialable turns a listen address into one a client on this machine can
// dial.
func Dialable(addr string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		h = "127.0.0.1"
	}
	return net.JoinHostPort(h, p)
}

// Reachable turns a listen address into one other machines can dial: an
// unspecified host becomes the machine's primary address.
func Reachable(addr string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		h = PrimaryAddress()
	}
	return net.JoinHostPort(h, p)
}

// PrimaryAddress is the machine's first global unicast IPv4 address on an
// interface that is up, or loopback when it has none.
func PrimaryAddress() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
