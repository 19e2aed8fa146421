package overlay

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// testKey is a public key made of one byte, for tables.
func testKey(b byte) string {
	var k wgtypes.Key
	k[0] = b
	return k.String()
}

func member(node string, n byte, relay bool, eps ...string) Member {
	return Member{Node: node, OverlayMember: spec.OverlayMember{Key: testKey(n), IP: fmt.Sprintf("10.88.0.%d", n), Endpoints: eps, Relay: relay}}
}

// TestPathsDecide: a peer never heard directly goes through the relay
// when there is one (its /32 on the relay's entry, its own entry kept with
// its endpoint and keepalive); a direct handshake newer than the switch
// brings it direct; a direct path gone stale goes back through the relay;
// without a relay it stays direct; a relay is never relayed; a handshake
// older than OverlayStale counts as none.
func TestPathsDecide(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b, r := member("a", 1, false), member("b", 2, false, "192.0.2.2:51820"), member("r", 3, true, "198.51.100.3:51820")
	type step struct {
		at  time.Duration            // since t0
		hs  map[string]time.Duration // node -> handshake at (since t0)
		via map[string]string        // node -> relay; missing: direct
		ips map[string][]string      // node -> allowed IPs, when checked
	}
	for _, c := range []struct {
		name    string
		members []Member
		steps   []step
	}{
		{"relayed at first while a relay exists, direct on a direct handshake", []Member{a, b, r}, []step{
			{at: 0, via: map[string]string{"b": "r"}, ips: map[string][]string{"b": nil, "r": {"10.88.0.3/32", "10.88.0.2/32"}}},
			{at: 5 * time.Second, hs: map[string]time.Duration{"r": 1 * time.Second}, via: map[string]string{"b": "r"}},
			{at: 30 * time.Second, hs: map[string]time.Duration{"r": 25 * time.Second}, via: map[string]string{"b": "r"}},
			{at: 40 * time.Second, hs: map[string]time.Duration{"r": 25 * time.Second, "b": 35 * time.Second}, via: map[string]string{},
				ips: map[string][]string{"b": {"10.88.0.2/32"}, "r": {"10.88.0.3/32"}}},
		}},
		{"a direct path gone stale goes through the relay again", []Member{a, b, r}, []step{
			{at: 0, hs: map[string]time.Duration{"b": 0, "r": 0}, via: map[string]string{}},
			{at: spec.OverlayStale + RelayAfter, hs: map[string]time.Duration{"b": 0, "r": spec.OverlayStale}, via: map[string]string{"b": "r"}},
		}},
		{"a handshake in time keeps it direct", []Member{a, b, r}, []step{
			{at: 0},
			{at: 3 * time.Second, hs: map[string]time.Duration{"b": 2 * time.Second, "r": 2 * time.Second}},
			{at: 60 * time.Second, hs: map[string]time.Duration{"b": 50 * time.Second, "r": 50 * time.Second}, via: map[string]string{}},
		}},
		{"a stale handshake counts as none", []Member{a, b, r}, []step{
			{at: 0, hs: map[string]time.Duration{"b": 0, "r": 0}},
			{at: spec.OverlayStale, hs: map[string]time.Duration{"b": 0, "r": spec.OverlayStale - time.Second}, via: map[string]string{"b": "r"}},
		}},
		{"no relay: direct for ever", []Member{a, b}, []step{
			{at: 0}, {at: time.Minute, via: map[string]string{}, ips: map[string][]string{"b": {"10.88.0.2/32"}}},
		}},
		{"the relay itself is never relayed", []Member{a, b, r}, []step{
			{at: 0}, {at: time.Minute, via: map[string]string{"b": "r"}},
		}},
		{"seen from the relay: nobody is relayed", []Member{a, b, r}, []step{
			{at: 0}, {at: time.Minute, via: map[string]string{}},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			self := "a"
			if c.name == "seen from the relay: nobody is relayed" {
				self = "r"
			}
			var p Paths
			keyOf := map[string]string{}
			for _, m := range c.members {
				keyOf[m.Node] = m.Key
			}
			for _, s := range c.steps {
				hs := map[string]time.Time{}
				for n, at := range s.hs {
					hs[keyOf[n]] = t0.Add(at)
				}
				plan := p.Decide(self, c.members, hs, t0.Add(s.at))
				got := map[string]string{}
				for _, path := range plan.Paths {
					if path.Node == self {
						t.Fatalf("at %s: a path to self", s.at)
					}
					if path.Via != "" {
						got[path.Node] = path.Via
					}
				}
				if s.via != nil && fmt.Sprint(got) != fmt.Sprint(s.via) {
					t.Errorf("at %s: relayed %v, want %v", s.at, got, s.via)
				}
				for _, peer := range plan.Peers {
					if peer.Keepalive != spec.OverlayKeepalive {
						t.Errorf("at %s: peer %s has keepalive %s", s.at, peer.Key, peer.Keepalive)
					}
					for n, want := range s.ips {
						if keyOf[n] != peer.Key {
							continue
						}
						var ips []string
						for _, p := range peer.AllowedIPs {
							ips = append(ips, p.String())
						}
						if !slices.Equal(ips, want) {
							t.Errorf("at %s: %s's allowed IPs %v, want %v", s.at, n, ips, want)
						}
					}
				}
			}
		})
	}
}

// TestPathsTryEachEndpoint: a peer with no handshake is tried again every
// RelayAfter, at its next endpoint, and keeps the one a handshake came on.
func TestPathsTryEachEndpoint(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b := member("b", 2, false, "192.0.2.2:51820", "203.0.113.2:51820")
	members := []Member{member("a", 1, false), b}
	var p Paths
	endpoint := func(at time.Duration, hs time.Time) (string, []string) {
		plan := p.Decide("a", members, map[string]time.Time{b.Key: hs}, t0.Add(at))
		return plan.Peers[0].Endpoint, plan.Retry
	}
	if ep, retry := endpoint(0, time.Time{}); ep != "192.0.2.2:51820" || len(retry) != 0 {
		t.Fatalf("first: %s %v", ep, retry)
	}
	if ep, retry := endpoint(10*time.Second, time.Time{}); ep != "203.0.113.2:51820" || !slices.Equal(retry, []string{b.Key}) {
		t.Fatalf("after RelayAfter: %s %v", ep, retry)
	}
	if ep, retry := endpoint(15*time.Second, t0.Add(12*time.Second)); ep != "203.0.113.2:51820" || len(retry) != 0 {
		t.Fatalf("after a handshake: %s %v", ep, retry)
	}
	if ep, _ := endpoint(time.Minute, t0.Add(50*time.Second)); ep != "203.0.113.2:51820" {
		t.Fatalf("a minute on: %s", ep)
	}
}

// TestDiff: peers change in place: a new peer whole, a changed one only
// what changed, an endpoint unchanged not set again, a gone one removed;
// nothing when nothing changed.
func TestDiff(t *testing.T) {
	k := func(b byte) wgtypes.Key { return wgtypes.Key{b} }
	pfx := netip.MustParsePrefix
	have := map[wgtypes.Key]Peer{
		k(1): {Key: testKey(1), Endpoint: "192.0.2.1:51820", AllowedIPs: []netip.Prefix{pfx("10.88.0.1/32")}, Keepalive: 25 * time.Second},
		k(2): {Key: testKey(2), Endpoint: "192.0.2.2:51820", AllowedIPs: []netip.Prefix{pfx("10.88.0.2/32")}, Keepalive: 25 * time.Second},
		k(3): {Key: testKey(3), AllowedIPs: []netip.Prefix{pfx("10.88.0.3/32")}, Keepalive: 25 * time.Second},
	}
	if got := diff(have, have); len(got) != 0 {
		t.Fatalf("no change made %d changes: %s", len(got), uapiText(got))
	}
	want := map[wgtypes.Key]Peer{
		k(1): have[k(1)],
		k(2): {Key: testKey(2), Endpoint: "192.0.2.2:51820", AllowedIPs: []netip.Prefix{pfx("10.88.0.2/32"), pfx("10.88.0.3/32")}, Keepalive: 25 * time.Second},
		k(4): {Key: testKey(4), Endpoint: "192.0.2.4:51820", AllowedIPs: []netip.Prefix{pfx("10.88.0.4/32")}, Keepalive: 25 * time.Second},
	}
	got := uapiText(diff(have, want))
	hex := func(b byte) string { return hexKey(k(b)) }
	wantText := "public_key=" + hex(2) + "\nreplace_allowed_ips=true\nallowed_ip=10.88.0.2/32\nallowed_ip=10.88.0.3/32\n" +
		"public_key=" + hex(3) + "\nremove=true\n" +
		"public_key=" + hex(4) + "\nendpoint=192.0.2.4:51820\npersistent_keepalive_interval=25\nreplace_allowed_ips=true\nallowed_ip=10.88.0.4/32\n"
	if got != wantText {
		t.Fatalf("changes:\n%s\nwant:\n%s", got, wantText)
	}
	moved := map[wgtypes.Key]Peer{k(1): have[k(1)], k(2): {Key: testKey(2), Endpoint: "198.51.100.2:51820", AllowedIPs: have[k(2)].AllowedIPs, Keepalive: 25 * time.Second}, k(3): have[k(3)]}
	if got := uapiText(diff(have, moved)); got != "public_key="+hex(2)+"\nendpoint=198.51.100.2:51820\n" {
		t.Fatalf("an endpoint moved:\n%s", got)
	}
}

// TestParseUAPI reads the peers of the userspace API's get form.
func TestParseUAPI(t *testing.T) {
	text := "private_key=" + hexKey(wgtypes.Key{9}) + "\nlisten_port=51820\n" +
		"public_key=" + hexKey(wgtypes.Key{1}) + "\nendpoint=192.0.2.1:51820\nlast_handshake_time_sec=1700000000\nlast_handshake_time_nsec=5\ntx_bytes=10\nrx_bytes=20\n" +
		"public_key=" + hexKey(wgtypes.Key{2}) + "\nlast_handshake_time_sec=0\nlast_handshake_time_nsec=0\n"
	got, err := parseUAPI(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []PeerState{{Key: testKey(1), Endpoint: "192.0.2.1:51820", Handshake: time.Unix(1700000000, 5), Rx: 20, Tx: 10}, {Key: testKey(2)}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

// TestPathsRelayAppearingLater: a relay the roster names after a peer was
// first seen takes that peer at once when no direct handshake ever came
// (its first packet need not wait out RelayAfter), and a relayed path
// carries the relay's handshake, the session its traffic lives by.
func TestPathsRelayAppearingLater(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := member("a", 1, false), member("b", 2, false, "192.0.2.2:51820")
	r := member("r", 3, false, "198.51.100.3:51820")
	var p Paths
	plan := p.Decide("a", []Member{a, b, r}, nil, t0)
	for _, path := range plan.Paths {
		if path.Via != "" {
			t.Fatalf("with no relay, %s goes via %s", path.Node, path.Via)
		}
	}
	r.Relay = true
	relayHS := t0.Add(time.Second)
	plan = p.Decide("a", []Member{a, b, r}, map[string]time.Time{r.Key: relayHS}, t0.Add(2*time.Second))
	for _, path := range plan.Paths {
		if path.Node != "b" {
			continue
		}
		if path.Via != "r" {
			t.Errorf("b's path %+v: want it through r as soon as r relays", path)
		}
		if !path.Handshake.Equal(relayHS) {
			t.Errorf("b's relayed path's handshake %s, want the relay's %s", path.Handshake, relayHS)
		}
	}
}
