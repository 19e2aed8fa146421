package overlay

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// TestKeepWorking: an endpoint the roster gives is not set on a peer whose
// session is alive (it roamed to where its packets come from, behind NAT);
// it is once the session is stale; what else changed goes on.
func TestKeepWorking(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	key := func(b byte) wgtypes.Key { var k wgtypes.Key; k[0] = b; return k }
	ep := &net.UDPAddr{IP: net.IPv4(192, 168, 20, 2), Port: 51820}
	live := map[wgtypes.Key]time.Time{key(1): now.Add(-time.Minute), key(2): now.Add(-spec.OverlayStale - time.Second), key(3): now.Add(-time.Second)}
	changes := []wgtypes.PeerConfig{
		{PublicKey: key(1), Endpoint: ep},                          // alive: nothing left to do
		{PublicKey: key(2), Endpoint: ep},                          // stale: set
		{PublicKey: key(3), Endpoint: ep, ReplaceAllowedIPs: true}, // alive, allowed IPs changed
		{PublicKey: key(4), Endpoint: ep},                          // never heard: set
		{PublicKey: key(5), Remove: true},
	}
	out, kept := keepWorking(changes, live, now)
	got := map[byte]string{}
	for _, c := range out {
		got[c.PublicKey[0]] = fmt.Sprintf("endpoint=%v allowed=%v remove=%v", c.Endpoint != nil, c.ReplaceAllowedIPs, c.Remove)
	}
	want := map[byte]string{
		2: "endpoint=true allowed=false remove=false",
		3: "endpoint=false allowed=true remove=false",
		4: "endpoint=true allowed=false remove=false",
		5: "endpoint=false allowed=false remove=true",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes %v, want %v", got, want)
	}
	if len(kept) != 2 || kept[0] != key(1) || kept[1] != key(3) {
		t.Errorf("kept %v, want peers 1 and 3", kept)
	}
}
