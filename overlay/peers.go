package overlay

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Peer is one peer as the interface is to hold it.
type Peer struct {
	// Key is the peer's public key, standard base64.
	Key string
	// Endpoint is where to send to the peer, host:port; "": nowhere until
	// the peer is heard from.
	Endpoint string
	// AllowedIPs are the addresses sent to the peer and accepted from it.
	AllowedIPs []netip.Prefix
	// Keepalive is the persistent keepalive; zero: none.
	Keepalive time.Duration
}

// PeerState is what the interface says of one peer.
type PeerState struct {
	Key       string
	Endpoint  string
	Handshake time.Time // zero: none yet
	Rx, Tx    int64
}

// Set makes the interface's peers peers, in place: a peer new is added, one
// whose endpoint, addresses or keepalive changed is updated, one gone is
// removed; the others, and every session, are left as they are.
func (d *Device) Set(peers []Peer) error {
	want := map[wgtypes.Key]Peer{}
	for _, p := range peers {
		k, err := wgtypes.ParseKey(p.Key)
		if err != nil {
			return fmt.Errorf("overlay peer key %q: %w", p.Key, err)
		}
		if p.Endpoint != "" {
			if _, err := netip.ParseAddrPort(p.Endpoint); err != nil {
				return fmt.Errorf("overlay peer %s's endpoint: %w", p.Key, err)
			}
		}
		want[k] = p
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mode == "" {
		return fmt.Errorf("set the peers of %s: the interface is not up", d.cfg.Name)
	}
	changes := diff(d.peers, want)
	var kept []wgtypes.Key
	if slices.ContainsFunc(changes, func(c wgtypes.PeerConfig) bool { return c.Endpoint != nil }) {
		// Only a change of endpoint needs the sessions' handshakes: most
		// Sets change nothing, and reading them is a round trip.
		changes, kept = keepWorking(changes, d.liveLocked(), time.Now())
	}
	for _, k := range kept {
		// The endpoint wanted is set once the session the peer works by
		// is gone: the next Set compares with the one in force.
		w := want[k]
		w.Endpoint = d.peers[k].Endpoint
		want[k] = w
	}
	var moved []string // peers given another endpoint: a handshake is tried there at once
	for _, c := range changes {
		if _, had := d.peers[c.PublicKey]; had && c.Endpoint != nil {
			moved = append(moved, c.PublicKey.String())
		}
	}
	if len(changes) == 0 {
		return nil
	}
	var err error
	if d.dev != nil {
		err = d.dev.IpcSet(uapiText(changes))
	} else {
		err = d.wg.ConfigureDevice(d.cfg.Name, wgtypes.Config{Peers: changes})
	}
	if err != nil {
		// What the interface holds is not known now: the next Set sends
		// every peer whole.
		d.peers = map[wgtypes.Key]Peer{}
		return fmt.Errorf("set the peers of %s: %w", d.cfg.Name, err)
	}
	d.peers = want
	return d.retryLocked(moved)
}

// liveLocked is the last handshake of each peer the interface holds, by
// key; a read that fails is none (every endpoint is then set).
func (d *Device) liveLocked() map[wgtypes.Key]time.Time {
	peers, err := d.peersLocked()
	if err != nil {
		return nil
	}
	out := make(map[wgtypes.Key]time.Time, len(peers))
	for _, p := range peers {
		if k, err := wgtypes.ParseKey(p.Key); err == nil && !p.Handshake.IsZero() {
			out[k] = p.Handshake
		}
	}
	return out
}

// keepWorking is changes without the endpoint of a peer whose session is
// alive (a handshake within spec.OverlayStale): WireGuard follows a peer
// to the address its packets come from (behind NAT, not the one it
// reported), and setting the reported one would cut a working session
// until the peer's next keepalive. A change left with nothing to do is
// dropped; kept names the peers whose endpoint was left as it is.
func keepWorking(changes []wgtypes.PeerConfig, live map[wgtypes.Key]time.Time, now time.Time) (out []wgtypes.PeerConfig, kept []wgtypes.Key) {
	for _, c := range changes {
		if hs, ok := live[c.PublicKey]; ok && c.Endpoint != nil && !c.Remove && now.Sub(hs) < spec.OverlayStale {
			c.Endpoint = nil
			kept = append(kept, c.PublicKey)
			if !c.ReplaceAllowedIPs && c.PersistentKeepaliveInterval == nil {
				continue
			}
		}
		out = append(out, c)
	}
	return out, kept
}

// diff is what changes the peers have into want, never replacing the peer
// list: a peer new is given whole, one changed only what changed (an
// endpoint unchanged is not set again, so the one a peer roamed to
// stays), one gone is removed. In key order.
func diff(have, want map[wgtypes.Key]Peer) []wgtypes.PeerConfig {
	var out []wgtypes.PeerConfig
	for k, w := range want {
		h, had := have[k]
		pc := wgtypes.PeerConfig{PublicKey: k}
		changed := false
		if w.Endpoint != "" && (!had || w.Endpoint != h.Endpoint) {
			pc.Endpoint = net.UDPAddrFromAddrPort(netip.MustParseAddrPort(w.Endpoint))
			changed = true
		}
		if !had || !slices.Equal(w.AllowedIPs, h.AllowedIPs) {
			pc.ReplaceAllowedIPs = true
			for _, p := range w.AllowedIPs {
				pc.AllowedIPs = append(pc.AllowedIPs, net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())})
			}
			changed = true
		}
		if !had || w.Keepalive != h.Keepalive {
			ka := w.Keepalive
			pc.PersistentKeepaliveInterval = &ka
			changed = true
		}
		if changed {
			out = append(out, pc)
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			out = append(out, wgtypes.PeerConfig{PublicKey: k, Remove: true})
		}
	}
	slices.SortFunc(out, func(a, b wgtypes.PeerConfig) int { return strings.Compare(a.PublicKey.String(), b.PublicKey.String()) })
	return out
}

// uapiText is changes in the userspace API's set form, which adds to what
// the device holds (no replace_peers).
func uapiText(changes []wgtypes.PeerConfig) string {
	var b strings.Builder
	for _, c := range changes {
		fmt.Fprintf(&b, "public_key=%s\n", hexKey(c.PublicKey))
		if c.UpdateOnly {
			b.WriteString("update_only=true\n")
		}
		if c.Remove {
			b.WriteString("remove=true\n")
			continue
		}
		if c.Endpoint != nil {
			fmt.Fprintf(&b, "endpoint=%s\n", c.Endpoint.AddrPort())
		}
		if c.PersistentKeepaliveInterval != nil {
			fmt.Fprintf(&b, "persistent_keepalive_interval=%d\n", int(c.PersistentKeepaliveInterval.Seconds()))
		}
		if c.ReplaceAllowedIPs {
			b.WriteString("replace_allowed_ips=true\n")
		}
		for _, n := range c.AllowedIPs {
			fmt.Fprintf(&b, "allowed_ip=%s\n", n.String())
		}
	}
	return b.String()
}

func hexKey(k wgtypes.Key) string { return hex.EncodeToString(k[:]) }

// Peers is what the interface says of each of its peers.
func (d *Device) Peers() ([]PeerState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peersLocked()
}

// peersLocked is Peers, d.mu held.
func (d *Device) peersLocked() ([]PeerState, error) {
	switch {
	case d.dev != nil:
		text, err := d.dev.IpcGet()
		if err != nil {
			return nil, fmt.Errorf("read the peers of %s: %w", d.cfg.Name, err)
		}
		return parseUAPI(text)
	case d.wg != nil:
		dev, err := d.wg.Device(d.cfg.Name)
		if err != nil {
			return nil, fmt.Errorf("read the peers of %s: %w", d.cfg.Name, err)
		}
		out := make([]PeerState, 0, len(dev.Peers))
		for _, p := range dev.Peers {
			s := PeerState{Key: p.PublicKey.String(), Rx: p.ReceiveBytes, Tx: p.TransmitBytes}
			if p.Endpoint != nil {
				s.Endpoint = p.Endpoint.String()
			}
			if !p.LastHandshakeTime.IsZero() && p.LastHandshakeTime.Unix() > 0 {
				s.Handshake = p.LastHandshakeTime
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("read the peers of %s: the interface is not up", d.cfg.Name)
}

// parseUAPI reads the peers of the userspace API's get form.
func parseUAPI(text string) ([]PeerState, error) {
	var out []PeerState
	var sec, nsec int64
	flush := func() {
		if len(out) > 0 && (sec != 0 || nsec != 0) {
			out[len(out)-1].Handshake = time.Unix(sec, nsec)
		}
		sec, nsec = 0, 0
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		if key == "public_key" {
			flush()
			b, err := hex.DecodeString(value)
			if err != nil || len(b) != wgtypes.KeyLen {
				return nil, fmt.Errorf("the wireguard device names a peer key %q that is not 32 bytes of hex", value)
			}
			out = append(out, PeerState{Key: wgtypes.Key(b).String()})
			continue
		}
		if len(out) == 0 {
			continue // the device's own settings
		}
		p := &out[len(out)-1]
		n, _ := strconv.ParseInt(value, 10, 64)
		switch key {
		case "endpoint":
			p.Endpoint = value
		case "last_handshake_time_sec":
			sec = n
		case "last_handshake_time_nsec":
			nsec = n
		case "rx_bytes":
			p.Rx = n
		case "tx_bytes":
			p.Tx = n
		}
	}
	flush()
	return out, nil
}

// Retry has a handshake tried now with each peer of keys that has an
// endpoint: its persistent keepalive is turned off and on again, which
// sends a keepalive at once. WireGuard gives up a handshake after 90 s and
// tries again only when something is sent to the peer, which nothing is
// while its traffic goes through a relay. A key the interface does not
// hold is passed over.
func (d *Device) Retry(keys []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.retryLocked(keys)
}

// retryLocked is Retry, d.mu held.
func (d *Device) retryLocked(keys []string) error {
	if d.mode == "" {
		return fmt.Errorf("retry the peers of %s: the interface is not up", d.cfg.Name)
	}
	var off, on []wgtypes.PeerConfig
	for _, s := range keys {
		k, err := wgtypes.ParseKey(s)
		if err != nil {
			continue
		}
		p, ok := d.peers[k]
		if !ok || p.Keepalive <= 0 {
			continue
		}
		zero, ka := time.Duration(0), p.Keepalive
		off = append(off, wgtypes.PeerConfig{PublicKey: k, UpdateOnly: true, PersistentKeepaliveInterval: &zero})
		on = append(on, wgtypes.PeerConfig{PublicKey: k, UpdateOnly: true, PersistentKeepaliveInterval: &ka})
	}
	if len(on) == 0 {
		return nil
	}
	var err error
	if d.dev != nil {
		err = d.dev.IpcSet(uapiText(off) + uapiText(on))
	} else if err = d.wg.ConfigureDevice(d.cfg.Name, wgtypes.Config{Peers: off}); err == nil {
		err = d.wg.ConfigureDevice(d.cfg.Name, wgtypes.Config{Peers: on})
	}
	if err != nil {
		return fmt.Errorf("retry the peers of %s: %w", d.cfg.Name, err)
	}
	return nil
}
