package host

import (
	"io"
	"log/slog"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// TestOverlayMembership: the host finds its own address (with the range's
// bits) and the members in the roster; no overlay, or no entry for the
// node, is no address; a member that does not check is left out; an entry
// for the node with another key than its key file's is refused.
func TestOverlayMembership(t *testing.T) {
	mine, _ := wgtypes.GeneratePrivateKey()
	other, _ := wgtypes.GeneratePrivateKey()
	o := &overlayRun{node: "a", public: mine.PublicKey().String(), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	member := func(key wgtypes.Key, ip string) *spec.OverlayMember {
		return &spec.OverlayMember{Key: key.PublicKey().String(), IP: ip, Endpoints: []string{"192.0.2.1:51820"}}
	}
	r := spec.Roster{Overlay: &spec.RosterOverlay{CIDR: "10.88.0.0/16"}, Nodes: []spec.RosterNode{
		{Name: "a", Address: "10.88.0.1", Overlay: member(mine, "10.88.0.1")},
		{Name: "b", Address: "10.88.0.2", Overlay: member(other, "10.88.0.2")},
		{Name: "c", Address: "10.99.0.3", Overlay: member(other, "10.99.0.3")},
		{Name: "d", Address: "192.0.2.4"},
	}}
	at, members, err := o.membership(r)
	if err != nil || at.String() != "10.88.0.1/16" || len(members) != 2 || members[1].Node != "b" {
		t.Fatalf("membership: %s %v %v", at, members, err)
	}
	off := r
	off.Overlay = nil
	if at, members, err := o.membership(off); err != nil || at.IsValid() || members != nil {
		t.Fatalf("overlay off: %s %v %v", at, members, err)
	}
	notOn := r
	notOn.Nodes = r.Nodes[1:]
	if at, _, err := o.membership(notOn); err != nil || at.IsValid() {
		t.Fatalf("node not on the overlay: %s %v", at, err)
	}
	wrong := r
	wrong.Nodes = []spec.RosterNode{{Name: "a", Overlay: member(other, "10.88.0.1")}}
	if _, _, err := o.membership(wrong); err == nil {
		t.Fatal("another key for this node was taken")
	}
}

// TestContainerIdentityPublish: a container's identity digest is what it
// was without the overlay while the overlay is off, and for a container
// that publishes no ports while it is on; one that publishes ports gets
// the overlay's address in its identity.
func TestContainerIdentityPublish(t *testing.T) {
	withPorts := spec.ContainerSpec{Name: "web", Image: "w:1", Ports: []spec.PortSpec{{Container: 80, Host: 8080}}}
	noPorts := spec.ContainerSpec{Name: "job", Image: "j:1"}
	base := containerApplier{node: "a", address: "192.0.2.1", subnet: DefaultSubnet}
	off := base
	off.overlay = func() string { return "" }
	on := base
	on.overlay = func() string { return "10.88.0.1" }
	for _, s := range []spec.ContainerSpec{withPorts, noPorts} {
		_, before := base.identity("/", s)
		if _, d := off.identity("/", s); d != before {
			t.Errorf("%s: the overlay off changed the digest", s.Name)
		}
		id, d := on.identity("/", s)
		if changed := d != before; changed != (len(s.Ports) > 0) {
			t.Errorf("%s: the overlay on changed the digest: %v", s.Name, changed)
		}
		if len(s.Ports) > 0 && id.Publish != "10.88.0.1" {
			t.Errorf("%s: publishes on %q", s.Name, id.Publish)
		}
	}
}
