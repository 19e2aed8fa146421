package mesh

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// newWGKey is a WireGuard public key's form: 32 random bytes, base64.
func newWGKey() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// rosterInForce is the roster the store records as in force.
func rosterInForce(t testing.TB, db *store.DB) (spec.Roster, uint64) {
	t.Helper()
	r, err := db.LastRoster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	roster, err := rosterOf(r)
	if err != nil {
		t.Fatal(err)
	}
	return roster, r.Seq
}

// reportOverlay hands the controller node's overlay report as its host
// publishes it.
func reportOverlay(t testing.TB, c *Controller, s spec.OverlayState) {
	t.Helper()
	c.onOverlay(context.Background(), &nats.Msg{Subject: spec.NodeSubject(s.Node, spec.KindOverlay), Data: mustJSON(t, s)})
}

// TestOverlayEnableShowDisable: enable gives every node with a key an
// address and sends the roster, its nodes' and routes' addresses the
// overlay's; another range is refused naming the one on; show lists the
// members; disable sends a roster without the overlay.
func TestOverlayEnableShowDisable(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "192.0.2.2", NKey: "Ubeta", WGKey: newWGKey(), Joined: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := db.AddNode(ctx, store.Node{Name: "gamma", Address: "192.0.2.3", NKey: "Ugamma", Joined: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "8.8.0.0/16"}); spec.KindOf(err) != spec.ReplyCaller || !strings.Contains(err.Error(), "not inside a private range") {
		t.Fatalf("a public range: %v, want the caller's error", err)
	}
	res, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "10.88.0.0/16"})
	if err != nil || res.Given != 2 || res.Roster == nil {
		t.Fatalf("enable: %+v, %v; want 2 given and a roster sent", res, err)
	}
	roster, _ := rosterInForce(t, db)
	if roster.Overlay == nil || roster.Overlay.CIDR != "10.88.0.0/16" {
		t.Fatalf("the roster's overlay: %+v", roster.Overlay)
	}
	got := map[string]spec.RosterNode{}
	for _, n := range roster.Nodes {
		got[n.Name] = n
	}
	if a := got["alpha"]; a.Address != "10.88.0.1" || a.Overlay == nil || a.Overlay.IP != "10.88.0.1" || spec.CheckWGKey(a.Overlay.Key) != nil {
		t.Fatalf("alpha in the roster: %+v %+v", a, a.Overlay)
	}
	if b := got["beta"]; b.Address != "10.88.0.2" || b.Overlay == nil {
		t.Fatalf("beta in the roster: %+v", b)
	}
	if g := got["gamma"]; g.Address != "192.0.2.3" || g.Overlay != nil {
		t.Fatalf("gamma, with no key, in the roster: %+v, want its own address and no member", g)
	}
	if _, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "10.99.0.0/16"}); spec.KindOf(err) != spec.ReplyRefused || !strings.Contains(err.Error(), "10.88.0.0/16") {
		t.Fatalf("another range: %v, want refused naming 10.88.0.0/16", err)
	}
	show, err := c.overlays.show(ctx, spec.OverlayShowRequest{})
	if err != nil || show.CIDR != "10.88.0.0/16" || len(show.Members) != 2 || show.Members[0].Node != "alpha" || show.Members[1].IP != "10.88.0.2" {
		t.Fatalf("show: %+v, %v", show, err)
	}
	off, err := c.overlays.disable(ctx, spec.OverlayDisableRequest{})
	if err != nil || !off.Was || off.Roster == nil {
		t.Fatalf("disable: %+v, %v", off, err)
	}
	if roster, _ := rosterInForce(t, db); roster.Overlay != nil || slices.ContainsFunc(roster.Nodes, func(n spec.RosterNode) bool { return n.Overlay != nil }) {
		t.Fatalf("the roster after disable: %+v", roster)
	}
	if show, err := c.overlays.show(ctx, spec.OverlayShowRequest{}); err != nil || show.CIDR != "" || len(show.Members) != 0 {
		t.Fatalf("show after disable: %+v, %v", show, err)
	}
}

// TestOverlayMembershipChangeIsOneRosterMessage: two reports changing a
// member's endpoints within the delay are one roster message, with the
// last endpoints, and no declaration; a report of paths alone changes
// nothing; a join on the overlay sends the roster too.
func TestOverlayMembershipChangeIsOneRosterMessage(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	meshOf(t, c, db)
	ctx := context.Background()
	if _, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "10.88.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	decls := onSubject(t, c, spec.DeclarationSubject("alpha"))
	rosters := onSubject(t, c, spec.RosterSubject)
	reportOverlay(t, c, spec.OverlayState{Node: "alpha", Mode: spec.OverlayUserspace, Peers: []spec.OverlayPath{{Node: "beta"}}})
	if len(c.overlays.kick) != 0 {
		t.Fatal("a report without endpoints or relay asked for a roster")
	}
	// A burst of changes: the first is sent at once, the rest within the
	// delay go as one message at its end.
	for _, port := range []string{"51820", "51821", "51822", "51823"} {
		reportOverlay(t, c, spec.OverlayState{Node: "alpha", Mode: spec.OverlayUserspace, Endpoints: []string{"192.0.2.1:" + port}})
	}
	reportOverlay(t, c, spec.OverlayState{Node: "alpha", Mode: spec.OverlayUserspace, Endpoints: []string{"192.0.2.1:51820", "203.0.113.7:51820"}, Relay: true})
	poll.Until(t, 10*time.Second, "the roster with alpha's last endpoints", func() error {
		roster, seq := rosterInForce(t, db)
		i := slices.IndexFunc(roster.Nodes, func(n spec.RosterNode) bool { return n.Name == "alpha" })
		m := roster.Nodes[i].Overlay
		if m != nil && len(m.Endpoints) == 2 && m.Relay {
			return nil
		}
		return fmt.Errorf("roster %d: alpha %+v", seq, m)
	})
	// Nothing more comes of the five reports: no change is waiting.
	poll.Until(t, 3*membershipDelay, "no change waiting", func() error {
		if len(c.overlays.kick) == 0 {
			return nil
		}
		return errors.New("a change waits")
	})
	if got := onSubject(t, c, spec.RosterSubject); got > rosters+2 {
		t.Fatalf("%d roster messages for five reports within the delay, want at most 2 (the first at once, the rest at the delay's end)", got-rosters)
	}
	if got := onSubject(t, c, spec.DeclarationSubject("alpha")); got != decls {
		t.Fatalf("a change of membership sent alpha %d declaration(s), want none", got-decls)
	}
	// A join on the overlay: the roster with it, at once.
	_, data := sealedEnrolment(t, c, "delta", alphaSealKey.Public().String())
	if _, err := c.enrolment.enrol(ctx, data); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "delta in the roster", func() error {
		r, seq := rosterInForce(t, db)
		if slices.ContainsFunc(r.Nodes, func(n spec.RosterNode) bool { return n.Name == "delta" && n.Overlay != nil }) {
			return nil
		}
		return fmt.Errorf("roster %d without it", seq)
	})
}

// TestEnrolNeedsAWireGuardKey: a join without a key, or with one that is
// not a key, is refused naming it; one with a key on the overlay is given
// an address.
func TestEnrolNeedsAWireGuardKey(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	if _, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "10.88.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	for key, says := range map[string]string{"": "no wireguard key", "bm90IGEga2V5": `wg_key: wireguard key "bm90IGEga2V5"`} {
		res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "beta"})
		if err != nil {
			t.Fatal(err)
		}
		tok, err := spec.ParseToken(res.Token)
		if err != nil {
			t.Fatal(err)
		}
		nodeKey, _ := nkeys.CreateUser()
		nodePub, _ := nodeKey.PublicKey()
		data := enrolRequestSealed(t, tok, spec.EnrolRequest{Protocol: spec.Protocol, TokenID: tok.ID, Node: "beta", NKey: nodePub,
			SealKey: alphaSealKey.Public().String(), WGKey: key, Address: "127.0.0.2"})
		if _, err := c.enrolment.enrol(ctx, data); err == nil || !strings.Contains(err.Error(), says) {
			t.Fatalf("key %q: %v, want refused saying %q", key, err, says)
		}
	}
	_, data := sealedEnrolment(t, c, "beta", alphaSealKey.Public().String())
	if _, err := c.enrolment.enrol(ctx, data); err != nil {
		t.Fatal(err)
	}
	n, err := db.Node(ctx, "beta")
	if err != nil || n.OverlayIP != "10.88.0.2" || n.WGKey == "" {
		t.Fatalf("beta: %+v, %v; want its key and 10.88.0.2", n, err)
	}
}

// TestOverlayReadFailureSendsNoRoster is invariant 1 for the overlay: a
// read of the members that fails while a change is sent sends no roster,
// and says every host keeps its peers.
func TestOverlayReadFailureSendsNoRoster(t *testing.T) {
	t.Parallel()
	var rf *readFailing
	c, db := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store { rf = &readFailing{Store: db}; return rf })
	ctx := context.Background()
	if _, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "10.88.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	for _, read := range []string{"nodes", "overlay"} {
		// Enabled again, every node has a new address: a new roster.
		_, seq := rosterInForce(t, db)
		rf.mu.Lock()
		rf.fail = read
		rf.mu.Unlock()
		res, err := c.overlays.disable(ctx, spec.OverlayDisableRequest{})
		if err != nil || res.Roster != nil || !strings.Contains(res.NamesKept, "disk I/O error reading "+read) {
			t.Fatalf("disable with the %s read failing: %+v, %v; want no roster and the read named", read, res, err)
		}
		c.overlays.sendOnce(ctx)
		rf.mu.Lock()
		rf.fail = ""
		rf.mu.Unlock()
		if _, now := rosterInForce(t, db); now != seq {
			t.Fatalf("the %s read failing: roster %d sent, want none after %d", read, now, seq)
		}
		if _, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "10.88.0.0/16"}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStatusFailsAStalePeer: a peer whose last handshake is older than
// spec.OverlayStale, or with none that long after both were on the
// overlay, is a failure naming both nodes; a fresh one is not.
func TestStatusFailsAStalePeer(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "192.0.2.2", NKey: "Ubeta", WGKey: newWGKey(), Joined: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "10.88.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	staleLine := func(st spec.StatusResult, node string) string {
		for _, p := range st.Problems {
			if strings.HasPrefix(p, node+" has had no overlay handshake") {
				return p
			}
		}
		return ""
	}
	clk.Add(time.Minute)
	reportOverlay(t, c, spec.OverlayState{Node: "alpha", Mode: spec.OverlayUserspace, Peers: []spec.OverlayPath{{Node: "beta", Handshake: clk.Now()}}})
	reportOverlay(t, c, spec.OverlayState{Node: "beta", Mode: spec.OverlayUserspace, Peers: []spec.OverlayPath{{Node: "alpha", Handshake: clk.Now(), Via: ""}}})
	st, err := c.status(ctx, spec.StatusRequest{})
	if err != nil || staleLine(st, "alpha") != "" || staleLine(st, "beta") != "" {
		t.Fatalf("fresh paths: %v %q, want no overlay failure", err, st.Problems)
	}
	clk.Add(spec.OverlayStale + time.Second)
	reportOverlay(t, c, spec.OverlayState{Node: "beta", Mode: spec.OverlayUserspace, Peers: []spec.OverlayPath{{Node: "alpha", Handshake: clk.Now()}}})
	st, err = c.status(ctx, spec.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if line := staleLine(st, "alpha"); !strings.Contains(line, "beta") {
		t.Fatalf("alpha's path to beta stale: %q, want a problem naming alpha and beta", st.Problems)
	}
	if line := staleLine(st, "beta"); line != "" {
		t.Fatalf("beta's fresh path: %q, want no overlay problem", line)
	}
	if st.AllClear {
		t.Fatal("a stale path and the all-clear")
	}
	i := slices.IndexFunc(st.Nodes, func(n spec.NodeStatus) bool { return n.Node == "alpha" })
	if !slices.ContainsFunc(st.Nodes[i].Failures, func(f string) bool { return strings.Contains(f, "no handshake with beta") }) {
		t.Fatalf("alpha's failures: %q", st.Nodes[i].Failures)
	}
	show, err := c.showNode(ctx, spec.NodeShowRequest{Name: "alpha"})
	if err != nil || show.Node.Overlay == nil || show.Node.Overlay.IP != "10.88.0.1" || !slices.Equal(show.Node.Overlay.Stale, []string{"beta"}) {
		t.Fatalf("node show alpha: %+v, %v", show.Node.Overlay, err)
	}
}

// BenchmarkOverlayPeerChange: one member's endpoints changed in a roster
// of 1,000 nodes on the overlay is one delta message of a few hundred
// bytes, not the roster.
func BenchmarkOverlayPeerChange(b *testing.B) {
	c, db := newController(b, &clock{now: time.Now()})
	ctx := context.Background()
	for i := range 999 {
		if err := db.AddNode(ctx, store.Node{Name: fmt.Sprintf("n%04d", i), Address: fmt.Sprintf("192.0.%d.%d", i/250, i%250+1), NKey: fmt.Sprintf("Un%04d", i), WGKey: newWGKey(), Joined: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "10.88.0.0/16"}); err != nil {
		b.Fatal(err)
	}
	before := c.metrics.rosterBytes.Load()
	sent := c.metrics.rostersSent.Load()
	b.ResetTimer()
	for i := range b.N {
		s := spec.OverlayState{Node: "n0500", Mode: spec.OverlayUserspace, Endpoints: []string{fmt.Sprintf("198.51.100.%d:51820", i%200+1)}}
		if _, err := db.RecordOverlayState(ctx, s, time.Now()); err != nil {
			b.Fatal(err)
		}
		if r, err := c.sendNames(ctx); err != nil || r == nil {
			b.Fatalf("send: %+v, %v", r, err)
		}
	}
	b.StopTimer()
	if n := c.metrics.rostersSent.Load() - sent; n != uint64(b.N) {
		b.Fatalf("%d roster messages for %d changes", n, b.N)
	}
	b.ReportMetric(float64(c.metrics.rosterBytes.Load()-before)/float64(b.N), "bytes/op")
}

// TestLyingOverlayReportsAreRefused: a report on one node's subject that
// names another node, a mode no WireGuard has, an endpoint that is no
// address, or a peer that is no node name changes nothing the controller
// keeps and sends no roster; a true report after them is kept.
func TestLyingOverlayReportsAreRefused(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "192.0.2.2", NKey: "Ubeta", WGKey: newWGKey(), Joined: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.overlays.enable(ctx, spec.OverlayEnableRequest{CIDR: "10.88.0.0/16"}); err != nil {
		t.Fatal(err)
	}
	on := func(subjectNode string, s spec.OverlayState) {
		t.Helper()
		c.onOverlay(ctx, &nats.Msg{Subject: spec.NodeSubject(subjectNode, spec.KindOverlay), Data: mustJSON(t, s)})
	}
	good := spec.OverlayState{Node: "alpha", Mode: spec.OverlayUserspace, Endpoints: []string{"192.0.2.1:51820"}}
	for name, s := range map[string]spec.OverlayState{
		"names another node":      {Node: "beta", Mode: spec.OverlayUserspace, Endpoints: []string{"203.0.113.9:51820"}},
		"a mode no WireGuard has": {Node: "alpha", Mode: "tap", Endpoints: []string{"203.0.113.9:51820"}},
		"an endpoint no address":  {Node: "alpha", Mode: spec.OverlayUserspace, Endpoints: []string{"evil.example:51820"}},
		"a peer no node name":     {Node: "alpha", Mode: spec.OverlayUserspace, Peers: []spec.OverlayPath{{Node: "\x1b[2K"}}},
	} {
		on("alpha", s)
		if reports, err := db.OverlayReports(ctx); err != nil || len(reports) != 0 {
			t.Fatalf("%s: kept %+v (%v)", name, reports, err)
		}
		if len(c.overlays.kick) != 0 {
			t.Fatalf("%s: asked for a roster", name)
		}
	}
	on("alpha", good)
	if reports, err := db.OverlayReports(ctx); err != nil || len(reports) != 1 {
		t.Fatalf("a true report after the lies: kept %+v (%v)", reports, err)
	}
}
