package spec

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// The overlay is the mesh's private network: one WireGuard interface on
// every host (OverlayInterface), one address for each node from the
// mesh's range, and the peers of each host composed by the controller into
// the roster. Turned on by mesh genesis --overlay CIDR or mesh overlay
// enable CIDR; with it on, every name of the mesh resolves to an overlay
// address.

// OverlayInterface is the name of the overlay's interface on every host.
const OverlayInterface = "mesh0"

// OverlayPort is the UDP port a host's WireGuard listens on unless its
// --wg-port says otherwise.
const OverlayPort = 51820

// OverlayKeepalive is the persistent keepalive every peer is given: a
// node behind NAT keeps its mapping open, and every session handshakes at
// least every two minutes, so a peer unheard for OverlayStale is down,
// never merely idle.
const OverlayKeepalive = 25 * time.Second

// OverlayStale is how long a peer may go without a handshake before
// mesh status calls its path a failure.
const OverlayStale = 3 * time.Minute

// MaxEndpoints bounds the endpoints one node may report.
const MaxEndpoints = 8

// RosterOverlay is the overlay's part of the roster when it is on: the
// range every overlay address is taken from. A roster without it has no
// overlay: a host holding one takes its interface down.
type RosterOverlay struct {
	CIDR string `json:"cidr"`
}

// OverlayMember is what the roster says of a node on the overlay: its
// WireGuard public key, its overlay address, where others may reach it and
// whether it relays.
type OverlayMember struct {
	// Key is the node's WireGuard public key, standard base64 of 32 bytes
	// (as wg(8) prints it).
	Key string `json:"wg_key"`
	// IP is the node's overlay address, inside the roster's CIDR.
	IP string `json:"overlay_ip"`
	// Endpoints are host:port UDP addresses the node's WireGuard listens
	// on, the operator's --endpoint first; none: the node is reachable by
	// nobody and only starts sessions itself.
	Endpoints []string `json:"endpoints,omitempty"`
	// Relay says the node forwards overlay traffic between peers that
	// cannot reach each other (started with --relay, and reachable).
	Relay bool `json:"relay,omitempty"`
}

// Equal says whether two members are the same.
func (m *OverlayMember) Equal(o *OverlayMember) bool {
	if m == nil || o == nil {
		return m == o
	}
	return m.Key == o.Key && m.IP == o.IP && m.Relay == o.Relay && slices.Equal(m.Endpoints, o.Endpoints)
}

// CheckWGKey refuses a WireGuard public key that is not standard base64 of
// 32 bytes.
func CheckWGKey(key string) error {
	b, err := base64.StdEncoding.DecodeString(key)
	if err != nil || len(b) != 32 {
		return fmt.Errorf("wireguard key %q is not 32 bytes in standard base64", Clip(key, 64))
	}
	return nil
}

// CheckEndpoint refuses an endpoint that is not host:port with an IP
// address host and a port from 1 to 65535.
func CheckEndpoint(ep string) error {
	ap, err := netip.ParseAddrPort(ep)
	if err != nil || ap.Port() == 0 || !ap.Addr().IsValid() || ap.Addr().IsUnspecified() {
		return fmt.Errorf("endpoint %q is not an IP address and a port (203.0.113.7:51820)", Clip(ep, 64))
	}
	return nil
}

// Check refuses a member whose key, address or endpoints do not parse, or
// whose address is outside cidr.
func (m OverlayMember) Check(cidr netip.Prefix) error {
	if err := CheckWGKey(m.Key); err != nil {
		return err
	}
	ip, err := netip.ParseAddr(m.IP)
	if err != nil || !cidr.Contains(ip) {
		return fmt.Errorf("overlay address %q is not in %s", Clip(m.IP, 64), cidr)
	}
	if len(m.Endpoints) > MaxEndpoints {
		return fmt.Errorf("%d endpoints, more than %d", len(m.Endpoints), MaxEndpoints)
	}
	for _, ep := range m.Endpoints {
		if err := CheckEndpoint(ep); err != nil {
			return err
		}
	}
	return nil
}

// CheckOverlayCIDR refuses a range that cannot be the overlay's: not IPv4,
// not private (10/8, 172.16/12, 192.168/16, 100.64/10), or with a prefix
// outside /8 to /28.
func CheckOverlayCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("overlay range %q is not a network in CIDR form (10.88.0.0/16)", Clip(s, 64))
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("overlay range %s has host bits set: give %s", p, p.Masked())
	}
	if !p.Addr().Is4() || p.Bits() < 8 || p.Bits() > 28 {
		return netip.Prefix{}, fmt.Errorf("overlay range %s must be IPv4 with a prefix from /8 to /28", p)
	}
	private := false
	for _, r := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"} {
		if rp := netip.MustParsePrefix(r); rp.Bits() <= p.Bits() && rp.Contains(p.Addr()) {
			private = true
		}
	}
	if !private {
		return netip.Prefix{}, fmt.Errorf("overlay range %s is not inside a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10)", p)
	}
	return p, nil
}

// OverlayPath is how a host reaches one peer now.
type OverlayPath struct {
	Node string `json:"node"`
	// Handshake is the peer's last completed handshake (zero: none yet).
	Handshake time.Time `json:"handshake,omitempty"`
	// Via is the relay node the traffic to the peer goes through; empty:
	// direct.
	Via string `json:"via,omitempty"`
	// Endpoint is where the peer was last heard from (host:port).
	Endpoint string `json:"endpoint,omitempty"`
}

// OverlayState is what a host reports of its overlay, on
// mesh.node.<node>.overlay, when it changes (a path, a handshake) and at
// most once every OverlayStateEvery: its mode and its peers' paths.
type OverlayState struct {
	Node string    `json:"node"`
	Time time.Time `json:"time"`
	// Mode is "kernel" or "userspace": which WireGuard runs the interface.
	Mode string `json:"mode"`
	// Endpoints are the host:port addresses the host's WireGuard listens
	// on, as the host sees them (the roster carries them to the peers).
	Endpoints []string `json:"endpoints,omitempty"`
	// Relay says the host was started with --relay: it forwards overlay
	// traffic between its peers.
	Relay bool          `json:"relay,omitempty"`
	Peers []OverlayPath `json:"peers,omitempty"`
	// Error is why the interface is not up as the roster says, if it is not.
	Error string `json:"error,omitempty"`
}

// OverlayStateEvery is the least time between two overlay reports of one
// host.
const OverlayStateEvery = 10 * time.Second

// Overlay modes.
const (
	OverlayKernel    = "kernel"
	OverlayUserspace = "userspace"
)

// Check refuses a report whose mode, endpoints or peers are not what a
// host can send: bounded by MaxEndpoints and MaxNodes, every text clipped
// by the caller.
func (s OverlayState) Check() error {
	if s.Mode != OverlayKernel && s.Mode != OverlayUserspace && s.Mode != "" {
		return fmt.Errorf("overlay mode %q is neither %s nor %s", Clip(s.Mode, 32), OverlayKernel, OverlayUserspace)
	}
	if len(s.Endpoints) > MaxEndpoints {
		return fmt.Errorf("%d endpoints, more than %d", len(s.Endpoints), MaxEndpoints)
	}
	for _, ep := range s.Endpoints {
		if err := CheckEndpoint(ep); err != nil {
			return err
		}
	}
	if len(s.Peers) > MaxNodes {
		return fmt.Errorf("%d peers, more than the %d nodes a mesh admits", len(s.Peers), MaxNodes)
	}
	for _, p := range s.Peers {
		if err := CheckName("node", p.Node); err != nil {
			return fmt.Errorf("a peer: %w", err)
		}
		if p.Via != "" {
			if err := CheckName("node", p.Via); err != nil {
				return fmt.Errorf("peer %s's relay: %w", p.Node, err)
			}
		}
	}
	return nil
}
