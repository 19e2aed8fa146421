package mesh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// TestControllersTravelInTheRoster: a controller of a cluster composes the
// controllers' bus URLs into every roster; when they change, its start
// sends the roster in force again, its names as they were, as a delta that
// carries the new list and makes the roster recorded under its signature;
// a push then sends no roster, and a start with the same list none either.
func TestControllersTravelInTheRoster(t *testing.T) {
	t.Parallel()
	two := []string{"nats://192.0.2.1:4222", "nats://192.0.2.2:4222"}
	three := append(slices.Clone(two), "nats://192.0.2.3:4222")
	c, db := newControllerCfg(t, &clock{now: time.Now()}, nil, func(cfg *Config) { cfg.Controllers = two })
	meshOf(t, c, db)
	ctx := context.Background()
	// Enough nodes that a delta is smaller than half the roster.
	for i := range 50 {
		if err := db.AddNode(ctx, store.Node{Name: fmt.Sprintf("n%03d", i), Address: fmt.Sprintf("10.1.0.%d", i), NKey: fmt.Sprintf("Un%03d", i), Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	if names, seq := rosterOnStream(t, c); !slices.Equal(names.Controllers, two) {
		t.Fatalf("roster %d carries controllers %q, want %q", seq, names.Controllers, two)
	}
	before, err := db.LastRoster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rosters := onSubject(t, c, spec.RosterSubject)

	// The cluster grew: the controller starts with three.
	c.composer.controllers = three
	if err := c.rosters.sendControllers(ctx, three); err != nil {
		t.Fatal(err)
	}
	if got := onSubject(t, c, spec.RosterSubject); got != rosters+1 {
		t.Fatalf("%d roster messages, want %d: one with the new controllers", got, rosters+1)
	}
	after, err := db.LastRoster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.js.Stream(ctx, spec.DeclarationStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, spec.RosterSubject)
	if err != nil {
		t.Fatal(err)
	}
	var d spec.RosterDelta
	if m.Header.Get(spec.RosterDeltaHeader) == "" || spec.Decode(m.Data, &d) != nil {
		t.Fatalf("the last message on %s is no delta: %.200s", spec.RosterSubject, m.Data)
	}
	if d.Base != before.Seq || !slices.Equal(d.Controllers, three) || len(d.SetNodes)+len(d.DropNodes)+len(d.SetRoutes)+len(d.DropRoutes) != 0 {
		t.Fatalf("delta %+v: want on base %d, the three controllers and no other change", d, before.Seq)
	}
	was, err := rosterOf(before)
	if err != nil {
		t.Fatal(err)
	}
	doc, raw, err := d.Doc(was)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, after.Body) || !ed25519.Verify(c.cfg.SignKey.Public().(ed25519.PublicKey), raw, d.FullSig) {
		t.Fatalf("the delta applied to roster %d makes\n%.300s\nwant the roster recorded, under its signature\n%.300s", before.Seq, raw, after.Body)
	}
	if len(doc.Names.Nodes) != len(was.Nodes) || len(doc.Names.Routes) != len(was.Routes) {
		t.Fatalf("the names changed: %d nodes %d routes, were %d %d", len(doc.Names.Nodes), len(doc.Names.Routes), len(was.Nodes), len(was.Routes))
	}

	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := c.rosters.sendControllers(ctx, three); err != nil {
		t.Fatal(err)
	}
	if got := onSubject(t, c, spec.RosterSubject); got != rosters+1 {
		t.Fatalf("%d roster messages after a push and a start that change nothing, want %d", got, rosters+1)
	}
}

// TestControllersNotSoundAreNotSent: a list of the controllers' bus URLs
// that a host would refuse (spec.CheckControllers) is not composed into
// the roster at all; none is none.
func TestControllersNotSoundAreNotSent(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, bad := range [][]string{nil, {}, {"http://192.0.2.1:4222"}, {"nats://192.0.2.1:4222", ""}} {
		if got := controllersOf(bad, log); got != nil {
			t.Errorf("%q composed as %q", bad, got)
		}
	}
	if got := controllersOf([]string{"nats://192.0.2.1:4222"}, log); !slices.Equal(got, []string{"nats://192.0.2.1:4222"}) {
		t.Errorf("a sound list composed as %q", got)
	}
}
