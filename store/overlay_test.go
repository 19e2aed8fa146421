package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// wgKey is a WireGuard public key's form for node number i.
func wgKey(i int) string {
	return fmt.Sprintf("%043d=", i)[:43] + "="
}

// overlayIPs is every node's overlay address, by name.
func overlayIPs(t *testing.T, db *store.DB) map[string]string {
	t.Helper()
	ns, err := db.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range ns {
		out[n.Name] = n.OverlayIP
	}
	return out
}

// TestOverlayAddressesRise: turned on, the overlay gives every node with a
// key an address, in join order, from the range's first host; a node
// joining later takes the next; an address a removal released is not
// given again while the counter has not wrapped, and a node without a key
// has none.
func TestOverlayAddressesRise(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openTemp(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for i, n := range []string{"alpha", "beta", "gamma"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "192.0.2.1", NKey: "U" + n, WGKey: wgKey(i), Joined: at.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AddNode(ctx, store.Node{Name: "keyless", Address: "192.0.2.9", NKey: "Ukeyless", Joined: at.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if ips := overlayIPs(t, db); ips["alpha"] != "" {
		t.Fatalf("the overlay off: addresses %v, want none", ips)
	}
	given, err := db.EnableOverlay(ctx, netip.MustParsePrefix("10.88.0.0/16"), at)
	if err != nil || given != 3 {
		t.Fatalf("enable: %d given, %v; want 3", given, err)
	}
	want := map[string]string{"alpha": "10.88.0.1", "beta": "10.88.0.2", "gamma": "10.88.0.3", "keyless": ""}
	if ips := overlayIPs(t, db); fmt.Sprint(ips) != fmt.Sprint(want) {
		t.Fatalf("addresses %v, want %v", ips, want)
	}
	// The same range again gives nothing new; another is refused.
	if given, err := db.EnableOverlay(ctx, netip.MustParsePrefix("10.88.0.0/16"), at); err != nil || given != 0 {
		t.Fatalf("enable again: %d given, %v; want 0", given, err)
	}
	var on *store.OverlayOnError
	if _, err := db.EnableOverlay(ctx, netip.MustParsePrefix("10.99.0.0/16"), at); !errors.As(err, &on) || on.CIDR != "10.88.0.0/16" {
		t.Fatalf("another range: %v, want refused naming 10.88.0.0/16", err)
	}
	if err := db.RemoveNode(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if err := db.AddNode(ctx, store.Node{Name: "delta", Address: "192.0.2.4", NKey: "Udelta", WGKey: wgKey(4), Joined: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if ip := overlayIPs(t, db)["delta"]; ip != "10.88.0.4" {
		t.Fatalf("delta after beta's removal: %q, want 10.88.0.4 (the counter rises; beta's is not reused)", ip)
	}
	o, err := db.Overlay(ctx)
	if err != nil || o.CIDR != "10.88.0.0/16" || !o.Enabled.Equal(at) {
		t.Fatalf("the overlay: %+v, %v", o, err)
	}
	if was, err := db.DisableOverlay(ctx); err != nil || !was {
		t.Fatalf("disable: %v, %v", was, err)
	}
	if o, err := db.Overlay(ctx); err != nil || o.On() {
		t.Fatalf("the overlay off: %+v, %v", o, err)
	}
	if ips := overlayIPs(t, db); ips["alpha"] != "" || ips["delta"] != "" {
		t.Fatalf("the overlay off: addresses %v, want none", ips)
	}
}

// TestOverlayReleasedAddressWaitsForEveryRoster: in a range whose every
// address is taken, a removed node's address is given again only once
// every node holds a roster issued after the removal; before that, the
// range is full.
func TestOverlayReleasedAddressWaitsForEveryRoster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openTemp(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if _, err := db.EnableOverlay(ctx, netip.MustParsePrefix("10.88.0.0/28"), at); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 14; i++ {
		if err := db.AddNode(ctx, store.Node{Name: fmt.Sprintf("n%02d", i), Address: "192.0.2.1", NKey: fmt.Sprint("U", i), WGKey: wgKey(i), Joined: at}); err != nil {
			t.Fatal(err)
		}
	}
	if ip := overlayIPs(t, db)["n14"]; ip != "10.88.0.14" {
		t.Fatalf("n14: %q, want 10.88.0.14, the range's last host", ip)
	}
	if err := db.RecordRoster(ctx, store.Roster{Seq: 5, Body: []byte("{}"), Sig: []byte("s"), Content: "sha256:x", Sent: at, Expires: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := db.RemoveNode(ctx, "n02"); err != nil {
		t.Fatal(err)
	}
	err := db.AddNode(ctx, store.Node{Name: "late", Address: "192.0.2.1", NKey: "Ulate", WGKey: wgKey(20), Joined: at})
	if err == nil || !strings.Contains(err.Error(), "is full") {
		t.Fatalf("a node while every host may hold n02's address: %v, want the range full", err)
	}
	// Every node but one holds roster 6: still not.
	for i := 1; i <= 14; i++ {
		seq := uint64(6)
		if i == 3 {
			seq = 5
		}
		if i == 2 {
			continue
		}
		if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: fmt.Sprintf("n%02d", i), RosterSeq: seq}, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AddNode(ctx, store.Node{Name: "late", Address: "192.0.2.1", NKey: "Ulate", WGKey: wgKey(20), Joined: at}); err == nil {
		t.Fatal("n02's address given while n03 holds the roster of its release")
	}
	if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "n03", RosterSeq: 6}, at); err != nil {
		t.Fatal(err)
	}
	if err := db.AddNode(ctx, store.Node{Name: "late", Address: "192.0.2.1", NKey: "Ulate", WGKey: wgKey(20), Joined: at}); err != nil {
		t.Fatal(err)
	}
	if ip := overlayIPs(t, db)["late"]; ip != "10.88.0.2" {
		t.Fatalf("late: %q, want n02's released 10.88.0.2", ip)
	}
}

// TestEnrolGivesAnOverlayAddress: a node enrolled with a key while the
// overlay is on has its address from the enrolment's transaction; one
// without a key has none.
func TestEnrolGivesAnOverlayAddress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openTemp(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if _, err := db.EnableOverlay(ctx, netip.MustParsePrefix("10.88.0.0/16"), now); err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"beta", "gamma"} {
		id := "t" + n
		if err := db.AddToken(ctx, store.Token{ID: id, Node: n, EnrolNKey: "U" + id, Created: now, Expires: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		key := ""
		if n == "beta" {
			key = wgKey(i)
		}
		if err := db.Enrol(ctx, id, store.Node{Name: n, Address: "192.0.2.2", NKey: "U" + n, WGKey: key, Joined: now}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.Node(ctx, "beta")
	if err != nil || got.OverlayIP != "10.88.0.1" || got.WGKey != wgKey(0) {
		t.Fatalf("beta: %+v, %v; want 10.88.0.1 and its key", got, err)
	}
	if ip := overlayIPs(t, db)["gamma"]; ip != "" {
		t.Fatalf("gamma, with no key: %q, want no address", ip)
	}
}

// TestRecordOverlayStateSaysWhenTheRosterChanges: a member's report
// changes the roster when its endpoints or relay flag change, not when
// only its peers' paths do; a node off the overlay never does.
func TestRecordOverlayStateSaysWhenTheRosterChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openTemp(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if err := db.AddNode(ctx, store.Node{Name: "alpha", Address: "192.0.2.1", NKey: "Ualpha", WGKey: wgKey(1), Joined: at}); err != nil {
		t.Fatal(err)
	}
	s := spec.OverlayState{Node: "alpha", Mode: spec.OverlayUserspace, Endpoints: []string{"192.0.2.1:51820"}}
	if changed, err := db.RecordOverlayState(ctx, s, at); err != nil || changed {
		t.Fatalf("off the overlay: changed %v, %v; want no change", changed, err)
	}
	if _, err := db.EnableOverlay(ctx, netip.MustParsePrefix("10.88.0.0/16"), at); err != nil {
		t.Fatal(err)
	}
	s.Peers = []spec.OverlayPath{{Node: "beta", Handshake: at}}
	if changed, err := db.RecordOverlayState(ctx, s, at); err != nil || changed {
		t.Fatalf("only a path: changed %v, %v; want no change", changed, err)
	}
	s.Relay = true
	if changed, err := db.RecordOverlayState(ctx, s, at); err != nil || !changed {
		t.Fatalf("relay on: changed %v, %v; want a change", changed, err)
	}
	s.Endpoints = append(s.Endpoints, "203.0.113.7:51820")
	if changed, err := db.RecordOverlayState(ctx, s, at.Add(time.Second)); err != nil || !changed {
		t.Fatalf("an endpoint more: changed %v, %v; want a change", changed, err)
	}
	n, err := db.Node(ctx, "alpha")
	if err != nil || !n.Relay || len(n.Endpoints) != 2 || n.OverlayMode != spec.OverlayUserspace {
		t.Fatalf("alpha: %+v, %v", n, err)
	}
	r, err := db.OverlayReportOf(ctx, "alpha")
	if err != nil || len(r.State.Peers) != 1 || !r.At.Equal(at.Add(time.Second)) {
		t.Fatalf("alpha's report: %+v, %v", r, err)
	}
	all, err := db.OverlayReports(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("every report: %v, %v", all, err)
	}
	if _, err := db.RecordOverlayState(ctx, spec.OverlayState{Node: "nobody"}, at); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a report of no node: %v, want ErrNotFound", err)
	}
}

// TestOverlayAddressesStayUnusedAcrossDisable: after overlay disable
// and enable, the counter goes on from where it was, so no node is given
// an address a host may still hold from before the disable; once the
// counter wraps, those addresses wait, as a removed node's do, until
// every node holds a roster issued after the disable.
func TestOverlayAddressesStayUnusedAcrossDisable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openTemp(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cidr := netip.MustParsePrefix("10.88.0.0/28") // hosts .1 to .14
	nodes := []string{"alpha", "beta", "gamma"}
	for i, n := range nodes {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "192.0.2.1", NKey: "U" + n, WGKey: wgKey(i), Joined: at.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.EnableOverlay(ctx, cidr, at); err != nil {
		t.Fatal(err)
	}
	before := overlayIPs(t, db)
	if err := db.RecordRoster(ctx, store.Roster{Seq: 5, Body: []byte("{}"), Sig: []byte("s"), Content: "sha256:x", Sent: at, Expires: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if was, err := db.DisableOverlay(ctx); err != nil || !was {
		t.Fatalf("disable: %v, %v", was, err)
	}
	if given, err := db.EnableOverlay(ctx, cidr, at.Add(time.Hour)); err != nil || given != 3 {
		t.Fatalf("enable again: %d given, %v; want 3", given, err)
	}
	want := map[string]string{"alpha": "10.88.0.4", "beta": "10.88.0.5", "gamma": "10.88.0.6"}
	if ips := overlayIPs(t, db); fmt.Sprint(ips) != fmt.Sprint(want) {
		t.Fatalf("after disable and enable: addresses %v, want %v (before the disable: %v)", ips, want, before)
	}
	if o, err := db.Overlay(ctx); err != nil || o.CIDR != cidr.String() || !o.Enabled.Equal(at.Add(time.Hour)) {
		t.Fatalf("the overlay enabled again: %+v, %v", o, err)
	}
	// .7 to .14 go to eight more nodes; then the counter wraps, and the
	// addresses held before the disable wait for every node's roster.
	for i := 7; i <= 14; i++ {
		n := fmt.Sprintf("n%02d", i)
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "192.0.2.1", NKey: "U" + n, WGKey: wgKey(i), Joined: at.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	late := store.Node{Name: "late", Address: "192.0.2.1", NKey: "Ulate", WGKey: wgKey(20), Joined: at.Add(time.Hour)}
	if err := db.AddNode(ctx, late); err == nil || !strings.Contains(err.Error(), "is full") {
		t.Fatalf("a node while a host may hold the addresses from before the disable: %v, want the range full", err)
	}
	ns, err := db.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: n.Name, RosterSeq: 6}, at.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.AddNode(ctx, late); err != nil {
		t.Fatal(err)
	}
	if ip := overlayIPs(t, db)["late"]; ip != "10.88.0.1" {
		t.Fatalf("late, every node holding a roster after the disable: %q, want 10.88.0.1", ip)
	}
}
