package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/overlay"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// OverlayConfig is what the host's flags say of its part in the overlay.
type OverlayConfig struct {
	// Endpoint is a host:port others reach this host's WireGuard at,
	// named by the operator (--endpoint): reported first.
	Endpoint string
	// Relay says the host forwards overlay traffic between peers that
	// cannot reach each other (--relay).
	Relay bool
	// Port is the UDP port WireGuard listens on (--wg-port); zero means
	// spec.OverlayPort.
	Port int
}

// overlayTick is how often the host looks at its peers' handshakes, moves
// paths and reports what changed.
const overlayTick = 2 * time.Second

// overlayRefresh is how often a report is sent when nothing but the
// handshakes changed: often enough that the controller never sees a
// handshake older than spec.OverlayStale of a peer that is up.
const overlayRefresh = spec.OverlayStale / 3

// overlayRun is the host's overlay: the interface the held roster asks
// for, and what was last reported of it. Its methods are called from the
// delivery loop, and before it starts; address from any goroutine.
type overlayRun struct {
	cfg     OverlayConfig
	node    string
	private string // the WireGuard key, standard base64
	public  string
	log     *slog.Logger

	mu sync.Mutex
	// addr is the node's overlay address as the held roster gives it ("":
	// the roster has no overlay, or no member for this node).
	addr string
	dev  *overlay.Device
	// at is the interface's address with the range's bits; members the
	// roster's, for Paths.
	at      netip.Prefix
	members []overlay.Member
	paths   overlay.Paths
	// plan is what the paths last decided; peers what the interface last
	// said of its peers, by key.
	plan  overlay.Plan
	peers map[string]overlay.PeerState
	// err is why the interface is not as the roster says ("": it is).
	err string
	// sent is the last report sent, its time zero, and when.
	sent   *spec.OverlayState
	sentAt time.Time
}

// loadOverlay is the overlay of the host whose directory is dir: nil when
// it keeps no WireGuard key (it joined before the overlay existed); a key
// file there and not sound is an error.
func loadOverlay(dir, node string, cfg OverlayConfig, log *slog.Logger) (*overlayRun, error) {
	private, public, err := seal.LoadWGKey(filepath.Join(dir, seal.WGKeyFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the host's wireguard key: %w", err)
	}
	if cfg.Port == 0 {
		cfg.Port = spec.OverlayPort
	}
	return &overlayRun{cfg: cfg, node: node, private: private, public: public, log: log}, nil
}

// address is the node's overlay address while the held roster has the
// overlay on and this node on it; "" otherwise. Safe from any goroutine.
func (o *overlayRun) address() string {
	if o == nil {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.addr
}

// take makes the interface what roster r says: up with this node's
// address and its peers when the overlay is on and names this node; down
// when it is off or names this node not. A failure is kept for the
// report, and the next take or tick tries again.
func (o *overlayRun) take(ctx context.Context, r spec.Roster) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	at, members, err := o.membership(r)
	if err != nil {
		o.err = err.Error()
		o.log.Error("the roster's overlay is not taken; the interface stays as it is", "err", err)
		return
	}
	o.members = members
	if !at.IsValid() {
		o.addr, o.err = "", ""
		o.down()
		return
	}
	o.addr = at.Addr().String()
	if o.dev != nil && o.at != at {
		o.down()
	}
	o.at = at
	o.err = ""
	o.apply(ctx, time.Now())
}

// membership is this node's interface address and the overlay's members
// as r says; no address when the overlay is off or this node not on it.
func (o *overlayRun) membership(r spec.Roster) (netip.Prefix, []overlay.Member, error) {
	if r.Overlay == nil {
		return netip.Prefix{}, nil, nil
	}
	cidr, err := spec.CheckOverlayCIDR(r.Overlay.CIDR)
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	var at netip.Prefix
	var members []overlay.Member
	for _, n := range r.Nodes {
		if n.Overlay == nil {
			continue
		}
		if err := n.Overlay.Check(cidr); err != nil {
			o.log.Warn("an overlay member is left out", "node", n.Name, "err", err)
			continue
		}
		if n.Name == o.node {
			if n.Overlay.Key != o.public {
				return netip.Prefix{}, nil, fmt.Errorf("the roster gives node %s the wireguard key %s, and its key file's is %s", o.node, n.Overlay.Key, o.public)
			}
			at = netip.PrefixFrom(netip.MustParseAddr(n.Overlay.IP), cidr.Bits())
		}
		members = append(members, overlay.Member{Node: n.Name, OverlayMember: *n.Overlay})
	}
	return at, members, nil
}

// apply brings the interface up if it is not, and sets its peers by the
// paths decided now.
func (o *overlayRun) apply(ctx context.Context, now time.Time) {
	if !o.at.IsValid() {
		return
	}
	if o.dev == nil {
		dev, err := overlay.New(overlay.Config{PrivateKey: o.private, ListenPort: o.cfg.Port, Address: o.at}, o.log)
		if err == nil {
			err = dev.Up(ctx)
		}
		if err == nil && o.cfg.Relay {
			if err = dev.Forward(true); err != nil {
				dev.Down()
			}
		}
		if err != nil {
			o.err = err.Error()
			o.log.Error("overlay interface not up", "err", err)
			return
		}
		o.dev, o.paths = dev, overlay.Paths{}
	}
	states, err := o.dev.Peers()
	if err != nil {
		o.err = err.Error()
		return
	}
	hs := map[string]time.Time{}
	o.peers = map[string]overlay.PeerState{}
	for _, s := range states {
		hs[s.Key], o.peers[s.Key] = s.Handshake, s
	}
	plan := o.paths.Decide(o.node, o.members, hs, now)
	o.plan = plan
	if err := o.dev.Set(plan.Peers); err != nil {
		o.err = err.Error()
		o.log.Error("overlay peers not set", "err", err)
		return
	}
	if err := o.dev.Retry(plan.Retry); err != nil {
		o.log.Warn("overlay handshakes not tried again", "err", err)
	}
	o.err = ""
}

// down takes the interface down, if it is up.
func (o *overlayRun) down() {
	if o.dev == nil {
		return
	}
	if err := o.dev.Down(); err != nil {
		o.log.Warn("overlay interface not wholly removed", "err", err)
	}
	o.dev, o.plan, o.peers = nil, overlay.Plan{}, nil
}

// stop takes the interface down: the node was removed, or the host stops.
func (o *overlayRun) stop() {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down()
}

// tick moves the paths by the handshakes seen and reports on nc what
// changed, at most every spec.OverlayStateEvery.
func (o *overlayRun) tick(ctx context.Context, nc *nats.Conn) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	now := time.Now()
	o.apply(ctx, now)
	if nc == nil || (o.dev == nil && o.err == "" && o.sent == nil) {
		return
	}
	st := o.state()
	if o.sent != nil && now.Sub(o.sentAt) < spec.OverlayStateEvery {
		return
	}
	if o.sent != nil && sameReport(*o.sent, st) && now.Sub(o.sentAt) < overlayRefresh {
		return
	}
	st.Time = now.UTC()
	if err := publish(nc, spec.NodeSubject(o.node, spec.KindOverlay), st); err != nil {
		o.log.Warn("overlay state not sent", "err", err)
		return
	}
	st.Time = time.Time{}
	o.sent, o.sentAt = &st, now
}

// state is what the host reports of its overlay now, without its time.
func (o *overlayRun) state() spec.OverlayState {
	st := spec.OverlayState{Node: o.node, Relay: o.cfg.Relay, Error: spec.Clip(o.err, 512)}
	if o.dev == nil {
		return st
	}
	st.Mode = o.dev.Mode()
	st.Endpoints = endpoints(o.cfg, o.dev.Name(), o.at)
	keyOf := map[string]string{}
	for _, m := range o.members {
		keyOf[m.Node] = m.Key
	}
	for _, p := range o.plan.Paths {
		p.Endpoint = o.peers[keyOf[p.Node]].Endpoint
		st.Peers = append(st.Peers, p)
	}
	return st
}

// sameReport says whether two reports differ only in their peers'
// handshake times (each still one or none) and their peers' endpoints.
func sameReport(a, b spec.OverlayState) bool {
	strip := func(s spec.OverlayState) string {
		peers := make([]spec.OverlayPath, len(s.Peers))
		for i, p := range s.Peers {
			peers[i] = spec.OverlayPath{Node: p.Node, Via: p.Via}
			if !p.Handshake.IsZero() && time.Since(p.Handshake) < spec.OverlayStale {
				peers[i].Handshake = time.Unix(1, 0)
			}
		}
		s.Peers, s.Time = peers, time.Time{}
		b, _ := json.Marshal(s)
		return string(b)
	}
	return strip(a) == strip(b)
}

// endpoints are where this host's WireGuard may be reached: the
// operator's --endpoint first, then each address of the machine's
// interfaces that is IPv4, neither loopback nor link-local nor the
// overlay's own, with the listen port; at most spec.MaxEndpoints.
func endpoints(cfg OverlayConfig, iface string, at netip.Prefix) []string {
	var out []string
	if cfg.Endpoint != "" {
		out = append(out, cfg.Endpoint)
	}
	ifs, _ := net.Interfaces()
	for _, ifc := range ifs {
		if ifc.Name == iface || ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			pfx, err := netip.ParsePrefix(a.String())
			if err != nil {
				continue
			}
			ip := pfx.Addr()
			if !ip.Is4() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || at.Masked().Contains(ip) {
				continue
			}
			ep := netip.AddrPortFrom(ip, uint16(cfg.Port)).String()
			if !slices.Contains(out, ep) {
				out = append(out, ep)
			}
		}
	}
	if len(out) > spec.MaxEndpoints {
		out = out[:spec.MaxEndpoints]
	}
	return out
}
