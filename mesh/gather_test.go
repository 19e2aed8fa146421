package mesh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// failingStore is the real store with one read failing for one node, on
// demand: the seam where invariant 1 is tested.
type failingStore struct {
	*store.DB
	node string
	fail atomic.Bool
}

var errUnreachable = errors.New("the database system is not yet accepting connections")

func (f *failingStore) AssignmentsOf(ctx context.Context, node string) ([]store.Assignment, error) {
	if f.fail.Load() && node == f.node {
		// As the real store words a failed read.
		return nil, fmt.Errorf("read assignments of node %q: %w", node, errUnreachable)
	}
	return f.DB.AssignmentsOf(ctx, node)
}

// Assignments fails as the read of every node's assignments does when
// node's row cannot be read.
func (f *failingStore) Assignments(ctx context.Context) ([]store.Assignment, error) {
	if f.fail.Load() {
		return nil, fmt.Errorf("read assignments: settings of web on %s: %w", f.node, errUnreachable)
	}
	return f.DB.Assignments(ctx)
}

// meshOf sets up nodes alpha (from genesis), beta and gamma, with a module
// serving route web on each of alpha and beta.
func meshOf(t *testing.T, c *Controller, db *store.DB) {
	t.Helper()
	ctx := context.Background()
	for _, n := range []string{"beta", "gamma"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0." + n[:1], NKey: "U" + n, Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	web := spec.Module{Name: "web", Version: "1", Routes: []spec.Route{{Name: "web", Port: 80}},
		Resources: []spec.Resource{resource("/srv/web")}}
	web.Resources[0].Module, web.Resources[0].Name = "web", spec.ResourceName("web", spec.KindDirectory, "/srv/web")
	clash := spec.Module{Name: "clash", Version: "1", Resources: []spec.Resource{{Name: spec.ResourceName("clash", spec.KindDirectory, "/srv/web"),
		Kind: spec.KindDirectory, Module: "clash", Spec: &spec.DirectorySpec{Path: "/srv/web", Mode: 0o755}}}}
	if _, err := db.RegisterModules(ctx, []spec.Module{web, clash}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"alpha", "beta"} {
		if err := db.Assign(ctx, "web", n, nil, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
}

// receive records node's last sent declaration as applied, as its report would.
func receive(t *testing.T, db *store.DB, node string) {
	t.Helper()
	d, err := db.LastDeclaration(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.RecordReport(context.Background(), store.Report{Node: node, Seq: d.Seq, Body: []byte(`{}`), Received: time.Now()}, true); err != nil {
		t.Fatal(err)
	}
}

func routeNames(r spec.Roster) string {
	var names []string
	for _, rt := range r.Routes {
		names = append(names, rt.Name)
	}
	return strings.Join(names, ",")
}

// TestReadFailureIsRaisedNotAbsence holds invariant 1 at the store seam: a
// read that fails while composing beta fails the whole push, naming beta and
// the read; nothing is sent to anyone, so every roster stays as it was.
func TestReadFailureIsRaisedNotAbsence(t *testing.T) {
	t.Parallel()
	var fs *failingStore
	c, db := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store {
		fs = &failingStore{DB: db, node: "beta"}
		return fs
	})
	meshOf(t, c, db)
	ctx := context.Background()
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	before := map[string]store.Declaration{}
	for _, n := range []string{"alpha", "beta", "gamma"} {
		before[n], _ = db.LastDeclaration(ctx, n)
	}
	rosterBefore, seqBefore := rosterOnStream(t, c)
	if got := routeNames(rosterBefore); got != "web.alpha.internal,web.beta.internal" {
		t.Fatalf("the roster before: %s", got)
	}

	fs.fail.Store(true)
	_, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}})
	if err == nil {
		t.Fatal("a push succeeded while beta's assignments could not be read")
	}
	for _, want := range []string{"on beta", "read assignments", errUnreachable.Error(), "nothing was sent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("push error %q does not say %q", err, want)
		}
	}
	if _, err := c.composer.gather(ctx); err == nil {
		t.Fatal("gather returned no error beside a roster")
	}
	for _, n := range []string{"alpha", "beta", "gamma"} {
		after, _ := db.LastDeclaration(ctx, n)
		if after.Seq != before[n].Seq || string(after.Body) != string(before[n].Body) {
			t.Errorf("%s was sent declaration %d during a failed push", n, after.Seq)
		}
	}
	if _, seq := rosterOnStream(t, c); seq != seqBefore {
		t.Errorf("roster %d was sent during a failed push (%d before)", seq, seqBefore)
	}
}

// rosterOnStream is the last roster message on the stream, and its
// sequence.
func rosterOnStream(t *testing.T, c *Controller) (spec.Roster, uint64) {
	t.Helper()
	s, err := c.js.Stream(context.Background(), spec.DeclarationStream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetLastMsgForSubject(context.Background(), spec.RosterSubject)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Header.Get(spec.RosterDeltaHeader) == "" {
		var doc spec.RosterDoc
		if err := spec.Decode(raw.Data, &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Names, doc.Seq
	}
	// A delta: it announces the roster recorded last, under its signature.
	var d spec.RosterDelta
	if err := spec.Decode(raw.Data, &d); err != nil {
		t.Fatal(err)
	}
	last, err := c.deps.DB.LastRoster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Seq != last.Seq || !bytes.Equal(d.FullSig, last.Sig) {
		t.Fatalf("the delta on the stream announces roster %d, the store's last is %d (or its signature differs)", d.Seq, last.Seq)
	}
	names, err := rosterOf(last)
	if err != nil {
		t.Fatal(err)
	}
	return names, d.Seq
}

// TestNodeOwnFailureKeepsWhatItServes: beta's own set stops composing. It is
// sent nothing and the push says why; alpha is pushed as usual; the roster
// keeps beta's route from the declaration beta last received. gamma, which
// never received one and now fails, contributes none.
func TestNodeOwnFailureKeepsWhatItServes(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	meshOf(t, c, db)
	ctx := context.Background()
	if _, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha", "beta"}}); err != nil {
		t.Fatal(err)
	}
	receive(t, db, "beta")
	// Both now declare /srv/web on beta; gamma is given a setting nothing declares.
	if err := db.Assign(ctx, "clash", "beta", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.Assign(ctx, "web", "gamma", map[string]string{"colour": "blue"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	betaBefore, _ := db.LastDeclaration(ctx, "beta")

	res, err := c.push(ctx, spec.PushRequest{})
	if err != nil {
		t.Fatalf("one node's own failure failed the push: %v", err)
	}
	byNode := map[string]spec.PushNode{}
	for _, n := range res.Nodes {
		byNode[n.Node] = n
	}
	if !strings.Contains(byNode["beta"].Error, "both declare /srv/web") || byNode["beta"].Seq != 0 {
		t.Errorf("beta: %+v, want not sent, saying why", byNode["beta"])
	}
	if !strings.Contains(byNode["gamma"].Error, `setting "colour"`) {
		t.Errorf("gamma: %+v, want not sent, naming the setting", byNode["gamma"])
	}
	if byNode["alpha"].Error != "" || byNode["alpha"].Seq == 0 {
		t.Fatalf("alpha: %+v, want sent", byNode["alpha"])
	}
	if after, _ := db.LastDeclaration(ctx, "beta"); after.Seq != betaBefore.Seq {
		t.Errorf("beta was sent %d", after.Seq)
	}
	if roster, _ := rosterOnStream(t, c); routeNames(roster) != "web.alpha.internal,web.beta.internal" {
		t.Errorf("the roster %s: want beta's route kept from what it received", routeNames(roster))
	}
}
