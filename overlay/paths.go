package overlay

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// RelayAfter is how long a peer is tried directly, with no handshake,
// before its traffic goes through a relay (when there is one); also how
// long each of its endpoints is tried before the next.
const RelayAfter = 10 * time.Second

// Member is one node of the overlay, as the roster says.
type Member struct {
	Node string
	spec.OverlayMember
}

// Paths decides how this host reaches each peer: directly, at one of its
// endpoints, or through a relay. It remembers what it decided (since when
// a peer is tried, when it went through a relay), so it is called again
// with the same members as the handshakes and the clock move. The zero
// Paths is ready. Not safe for concurrent use.
type Paths struct {
	peers map[string]*path // by public key
}

// path is what Paths remembers of one peer.
type path struct {
	// since is when the peer was last given its direct path (first seen,
	// or back from a relay); tried is when its current endpoint was first
	// tried, ep which one it is.
	since, tried time.Time
	ep           int
	// relayed is when its traffic went through a relay (zero: direct).
	relayed time.Time
}

// Decide is the peers the interface is to hold and each peer's path, for
// the members of the roster seen from self, given the last handshake with
// each (by public key; zero or missing: none) and the time now.
//
// Every peer is given its first endpoint and the keepalive
// spec.OverlayKeepalive, so a direct handshake is tried at once. While no
// direct handshake came, and a relay exists (a member with Relay that is
// neither self nor the peer), the peer's traffic goes through the relay:
// its address is on the relay's entry, and its own entry keeps its
// endpoint and keepalive, so the first packet to it need not wait for a
// direct path that may never come (two sites behind NAT). A direct
// handshake newer than the switch to the relay brings it direct (a relay
// that appears later takes at once a peer never heard directly); a direct
// peer whose last handshake is older than spec.OverlayStale, with no new
// one within RelayAfter, goes through the relay again. A peer with no
// handshake within RelayAfter of being tried is tried again (Plan.Retry),
// at its next endpoint. A relay is never itself relayed; with no relay,
// every peer is direct.
func (p *Paths) Decide(self string, members []Member, handshakes map[string]time.Time, now time.Time) Plan {
	if p.peers == nil {
		p.peers = map[string]*path{}
	}
	var others []Member
	for _, m := range members {
		if m.Node != self {
			others = append(others, m)
		}
	}
	slices.SortFunc(others, func(a, b Member) int { return strings.Compare(a.Node, b.Node) })
	var plan Plan
	seen := map[string]bool{}
	via := map[string]string{} // node -> the relay its traffic goes through
	for _, m := range others {
		seen[m.Key] = true
		hs := handshakes[m.Key]
		fresh := !hs.IsZero() && now.Sub(hs) < spec.OverlayStale
		relay := relayFor(others, m)
		st := p.peers[m.Key]
		if st == nil {
			st = &path{since: now, tried: now}
			if relay != "" && !m.Relay && !fresh {
				st.relayed = now
			}
			p.peers[m.Key] = st
		}
		if !fresh && now.Sub(st.tried) >= RelayAfter && len(m.Endpoints) > 0 {
			st.ep = (st.ep + 1) % len(m.Endpoints)
			st.tried = now
			plan.Retry = append(plan.Retry, m.Key)
		}
		switch {
		case relay == "" || m.Relay:
			st.relayed = time.Time{}
		case !st.relayed.IsZero() && hs.After(st.relayed):
			st.relayed, st.since = time.Time{}, now
		case st.relayed.IsZero() && !fresh && (hs.IsZero() || now.Sub(st.since) >= RelayAfter):
			st.relayed = now
		}
		if !st.relayed.IsZero() {
			via[m.Node] = relay
		}
	}
	for k := range p.peers {
		if !seen[k] {
			delete(p.peers, k)
		}
	}
	carried := map[string][]netip.Prefix{} // relay node -> addresses it carries
	for _, m := range others {
		if r := via[m.Node]; r != "" {
			if a, ok := hostPrefix(m.IP); ok {
				carried[r] = append(carried[r], a)
			}
		}
	}
	keyOf := make(map[string]string, len(others))
	for _, m := range others {
		keyOf[m.Node] = m.Key
	}
	plan.Peers = make([]Peer, 0, len(others))
	plan.Paths = make([]spec.OverlayPath, 0, len(others))
	for _, m := range others {
		st := p.peers[m.Key]
		peer := Peer{Key: m.Key, Keepalive: spec.OverlayKeepalive}
		if len(m.Endpoints) > 0 {
			peer.Endpoint = m.Endpoints[st.ep%len(m.Endpoints)]
		}
		if a, ok := hostPrefix(m.IP); ok && via[m.Node] == "" {
			peer.AllowedIPs = append(peer.AllowedIPs, a)
		}
		peer.AllowedIPs = append(peer.AllowedIPs, carried[m.Node]...)
		plan.Peers = append(plan.Peers, peer)
		// A relayed path lives by the relay's session: its handshake is the
		// relay's (no handshake with the peer itself is expected).
		hs := handshakes[m.Key]
		if r := via[m.Node]; r != "" {
			hs = handshakes[keyOf[r]]
		}
		plan.Paths = append(plan.Paths, spec.OverlayPath{Node: m.Node, Handshake: hs, Via: via[m.Node]})
	}
	return plan
}

// Plan is what Paths decided: the peers the interface is to hold, each
// peer's path, and the peers (by public key) a handshake is to be tried
// with now: no handshake came since their endpoint was last tried.
type Plan struct {
	Peers []Peer
	Paths []spec.OverlayPath
	Retry []string
}

// relayFor is the relay the traffic to m goes through when it cannot be
// reached directly: the first member, by name, that relays and is not m
// ("": none). others holds no self.
func relayFor(others []Member, m Member) string {
	for _, r := range others {
		if r.Relay && r.Node != m.Node {
			return r.Node
		}
	}
	return ""
}

// hostPrefix is ip as a /32.
func hostPrefix(ip string) (netip.Prefix, bool) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}
