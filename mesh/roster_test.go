package mesh

import (
	"context"
	"crypto/ed25519"
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
)

// TestRouteIsOneRosterMessage: a push that adds one route and changes no
// node's resources sends one roster message and no declaration: every
// node's line says "unchanged, not sent", counted on the stream. The
// roster message holds the new route and each node's last declaration
// names a roster no later than it. Status shows the roster pending until
// the push.
func TestRouteIsOneRosterMessage(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	meshOf(t, c, db)
	ctx := context.Background()
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	nodes := []string{"alpha", "beta", "gamma"}
	before := map[string]uint64{}
	for _, n := range nodes {
		before[n] = onSubject(t, c, spec.DeclarationSubject(n))
	}
	rostersBefore := onSubject(t, c, spec.RosterSubject)
	if rostersBefore != 1 {
		t.Fatalf("the first push sent %d roster messages, want 1", rostersBefore)
	}

	// web, again, with a second route: the same resources on alpha and beta.
	web := spec.Module{Name: "web", Version: "2", Routes: []spec.Route{{Name: "web", Port: 80}, {Name: "admin", Port: 81}},
		Resources: []spec.Resource{resource("/srv/web")}}
	web.Resources[0].Module, web.Resources[0].Name = "web", spec.ResourceName("web", spec.KindDirectory, "/srv/web")
	if _, err := db.RegisterModules(ctx, []spec.Module{web}, time.Now()); err != nil {
		t.Fatal(err)
	}
	const pending = "the names every node serves have changed"
	if st, err := c.status(ctx, spec.StatusRequest{}); err != nil || !slices.ContainsFunc(st.Problems, func(p string) bool { return strings.HasPrefix(p, pending) }) {
		t.Fatalf("status before the push: %v %q, want the roster pending", err, st.Problems)
	}
	res, err := c.push(ctx, spec.PushRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.status(ctx, spec.StatusRequest{}); err != nil || slices.ContainsFunc(st.Problems, func(p string) bool { return strings.HasPrefix(p, pending) }) {
		t.Fatalf("status after the push: %v %q, want no roster pending", err, st.Problems)
	}
	for _, pn := range res.Nodes {
		if !pn.Unchanged || pn.Error != "" {
			t.Errorf("%s: %+v, want unchanged, not sent", pn.Node, pn)
		}
	}
	for _, n := range nodes {
		if got := onSubject(t, c, spec.DeclarationSubject(n)); got != before[n] {
			t.Errorf("%s: %d declarations on the stream, want %d: a route alone sends it nothing", n, got, before[n])
		}
	}
	if got := onSubject(t, c, spec.RosterSubject); got != rostersBefore+1 {
		t.Fatalf("%d roster messages on the stream, want %d: one for the new route", got, rostersBefore+1)
	}
	roster, seq := rosterOnStream(t, c)
	if got := routeNames(roster); got != "admin.alpha.internal,admin.beta.internal,web.alpha.internal,web.beta.internal" {
		t.Fatalf("roster %d holds routes %s", seq, got)
	}
	for _, n := range []string{"alpha", "beta"} {
		if d := lastOnStream(t, c, n); d.RosterRef == nil || d.RosterRef.Seq >= seq {
			t.Errorf("%s's declaration names roster %+v: want the reference to the one before %d", n, d.RosterRef, seq)
		}
	}
	// Nothing changed: nothing sent, roster included.
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := onSubject(t, c, spec.RosterSubject); got != rostersBefore+1 {
		t.Fatalf("a push that changes nothing sent a roster message (%d)", got)
	}
}

// TestRosterRequestAnsweredOnlyUnderTheNodesInbox: a node asks for the
// roster in force on its own subject; the answer (the signed bytes, as the
// stream carries them) goes only under its own inbox; before any roster
// was sent the answer says so; an expired roster is signed again under the
// next sequence, with the same names, and published.
func TestRosterRequestAnsweredOnlyUnderTheNodesInbox(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	key := joinWithKey(t, c, "beta")
	nc, err := busConn(t, c, key, spec.NodeInbox("beta"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ask := func() (spec.RosterReply, error) {
		t.Helper()
		return askRoster(t, nc, spec.RosterRequest{Want: 1})
	}
	if _, err := ask(); err == nil || !strings.Contains(err.Error(), "no roster was sent yet") || spec.KindOf(err) != spec.ReplyNotFound {
		t.Fatalf("before any push: %v, want not found, saying no roster was sent", err)
	}

	body := mustJSON(t, spec.RosterRequest{Want: 1})
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	tryReflect(t, c, db, nc, spec.NodeInbox("beta"), spec.NodeSubject("beta", spec.KindRoster), same(foreign(spec.NodeInbox("beta")), body), body, 0)
	r, err := ask()
	if err != nil {
		t.Fatal(err)
	}
	pub := c.cfg.SignKey.Public().(ed25519.PublicKey)
	last, err := db.LastRoster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(pub, r.Body, r.Sig) || string(r.Body) != string(last.Body) {
		t.Fatal("the answer is not the roster in force as signed")
	}
	// A host that names the roster in force (as each does when it
	// connects) is told it holds it, and sent nothing of it; one that
	// names it with other bytes, or an older one, is sent it.
	held := spec.RosterRequest{Have: last.Seq, HaveDigest: spec.ContentDigest(last.Body)}
	if r, err := askRoster(t, nc, held); err != nil || !r.Held || r.Body != nil || r.Sig != nil {
		t.Fatalf("a host holding the roster in force was answered %+v, %v; want held, no body", r, err)
	}
	// A host that takes it gzipped is sent it gzipped: the same bytes.
	if r, err := askRoster(t, nc, spec.RosterRequest{Gzip: true}); err != nil || r.Body != nil || r.BodyGzip == nil {
		t.Fatalf("a host taking gzip was answered %+v, %v; want the body gzipped alone", r, err)
	} else if body, err := spec.Gunzip(r.BodyGzip, spec.MaxRoster); err != nil || string(body) != string(last.Body) || !ed25519.Verify(pub, body, r.Sig) {
		t.Fatalf("the gzipped answer is not the roster in force as signed: %v", err)
	}
	for _, req := range []spec.RosterRequest{{Have: last.Seq, HaveDigest: "sha256:other"}, {Have: last.Seq - 1, HaveDigest: held.HaveDigest}, {}} {
		if r, err := askRoster(t, nc, req); err != nil || r.Held || string(r.Body) != string(last.Body) {
			t.Fatalf("a host naming %d as %s was answered %+v, %v; want the roster in force", req.Have, req.HaveDigest, r, err)
		}
	}

	clk.Add(spec.DefaultExpiry + time.Minute)
	r, err = ask()
	if err != nil {
		t.Fatal(err)
	}
	var doc, was spec.RosterDoc
	if err := spec.Decode(r.Body, &doc); err != nil || !ed25519.Verify(pub, r.Body, r.Sig) {
		t.Fatalf("the roster signed again: %v", err)
	}
	spec.Decode(last.Body, &was)
	if doc.Seq != was.Seq+1 || !clk.Now().Before(doc.Expires) || routeNames(doc.Names) != routeNames(was.Names) || !slices.Equal(nodeNames(doc.Names), nodeNames(was.Names)) {
		t.Fatalf("after expiry: roster %d expiring %s, want %d with the same names, unexpired", doc.Seq, doc.Expires, was.Seq+1)
	}
	if _, seq := rosterOnStream(t, c); seq != doc.Seq {
		t.Fatalf("the roster signed again is not on the stream (last %d)", seq)
	}
}

func nodeNames(r spec.Roster) []string {
	var out []string
	for _, n := range r.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// rosterFailing is the real store refusing to record a roster.
type rosterFailing struct{ *store.DB }

func (rosterFailing) RecordRoster(context.Context, store.Roster) error {
	return errors.New("disk I/O error")
}

// TestRosterNotSentSendsNothingThatNamesIt holds invariant 1 for the
// roster: one that cannot be recorded is not sent; no node that would name
// it is sent anything (each says why, and keeps the names it has).
func TestRosterNotSentSendsNothingThatNamesIt(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newControllerWith(t, clk, func(db *store.DB) Store { return rosterFailing{db} })
	meshOf(t, c, db)
	ctx := context.Background()
	res, err := c.push(ctx, spec.PushRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pn := range res.Nodes {
		if pn.Seq != 0 || !strings.Contains(pn.Error, "the roster was not sent (disk I/O error)") {
			t.Errorf("%s: %+v, want not sent, naming the roster's failure", pn.Node, pn)
		}
		if n := onSubject(t, c, spec.DeclarationSubject(pn.Node)); n != 0 {
			t.Errorf("%s was sent %d declarations", pn.Node, n)
		}
	}
	if n := onSubject(t, c, spec.RosterSubject); n != 0 {
		t.Errorf("%d roster messages on the stream", n)
	}
}

// TestWaitingForTheRosterIsShown: a host's report that its declaration
// waits for the roster it names is kept, not taken for an apply, and
// status says why the node has not applied it; the apply's report clears
// it.
func TestWaitingForTheRosterIsShown(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	if _, _, err := c.sender.send(ctx, "alpha", content{resources: []spec.Resource{resource("/a")}}, resendAll); err != nil {
		t.Fatal(err)
	}
	report := func(r spec.Report) {
		t.Helper()
		r.Node, r.Time = "alpha", time.Now()
		c.onReport(ctx, &nats.Msg{Subject: spec.NodeSubject("alpha", spec.KindReport), Data: mustJSON(t, r)}, requester{})
	}
	const says = "alpha has not applied declaration 1 yet: it names roster 7"
	has := func(st spec.StatusResult) bool {
		return slices.ContainsFunc(st.Problems, func(p string) bool { return strings.HasPrefix(p, says) })
	}
	// Reports are written by the report writer: wait for it.
	report(spec.Report{Seq: 1, Waiting: "it names roster 7, which this host has not got"})
	poll.Until(t, 10*time.Second, "status says alpha waits for its roster", func() error {
		st, err := c.status(ctx, spec.StatusRequest{})
		if err == nil && has(st) {
			return nil
		}
		return fmt.Errorf("%v %q", err, st.Problems)
	})
	if n, err := db.Node(ctx, "alpha"); err != nil || n.AppliedSeq != 0 {
		t.Fatalf("a waiting report was taken for an apply: applied %d, %v", n.AppliedSeq, err)
	}
	report(spec.Report{Seq: 1, Results: []spec.ResourceResult{}})
	poll.Until(t, 10*time.Second, "status no longer says alpha waits", func() error {
		st, err := c.status(ctx, spec.StatusRequest{})
		if err == nil && !has(st) {
			return nil
		}
		return fmt.Errorf("%v %q", err, st.Problems)
	})
	if n, err := db.Node(ctx, "alpha"); err != nil || n.AppliedSeq != 1 {
		t.Fatalf("the apply's report: applied %d, %v; want 1", n.AppliedSeq, err)
	}
}

// TestStatusSaysAHostBehindOnTheRoster: a host whose heartbeat, heard well
// after the roster in force was sent, names an older roster is a problem;
// one heard within the grace (its heartbeat may have crossed the roster),
// one that names the roster in force, and one that names none are not.
func TestStatusSaysAHostBehindOnTheRoster(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "127.0.0.9", NKey: "Ubeta", Joined: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	const says = "alpha serves the names of roster 1, the mesh's are roster 2"
	for _, tc := range []struct {
		name   string
		after  time.Duration
		roster uint64
		behind bool
	}{
		{"within the grace", 5 * time.Second, 1, false},
		{"after the grace", rosterGrace + time.Second, 1, true},
		{"the roster in force", time.Second, 2, false},
		{"none said", time.Second, 0, false},
	} {
		clk.Add(tc.after)
		// As the controller writes them: in a batch.
		if failed, err := db.RecordHeartbeats(ctx, []spec.Heartbeat{{Node: "alpha", Protocol: spec.Protocol, RosterSeq: tc.roster}}, clk.Now()); err != nil || len(failed) != 0 {
			t.Fatal(err, failed)
		}
		st, err := c.status(ctx, spec.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.ContainsFunc(st.Problems, func(p string) bool { return strings.HasPrefix(p, says) }); got != tc.behind {
			t.Errorf("%s: problems %q, want behind %v", tc.name, st.Problems, tc.behind)
		}
	}
	if n, err := db.Node(ctx, "alpha"); err != nil || n.RosterSeq != 0 {
		t.Fatalf("alpha's roster as kept: %d, %v", n.RosterSeq, err)
	}
}

// askRoster sends req on beta's roster subject over nc and reads the answer.
func askRoster(t *testing.T, nc *nats.Conn, req spec.RosterRequest) (spec.RosterReply, error) {
	t.Helper()
	m, err := nc.Request(spec.NodeSubject("beta", spec.KindRoster), mustJSON(t, req), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r spec.RosterReply
	return r, spec.DecodeReply(m.Data, &r)
}
