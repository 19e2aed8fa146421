package mesh

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go/jetstream"
)

// removalFailing is the real store whose RemoveNode fails on demand: the
// seam where a removal stops half-way, after the bus's steps.
type removalFailing struct {
	*store.DB
	fail atomic.Bool
}

func (f *removalFailing) RemoveNode(ctx context.Context, name string) error {
	if f.fail.Load() {
		return errors.New(`remove node "` + name + `": database is locked`)
	}
	return f.DB.RemoveNode(ctx, name)
}

// onStream is how many declarations the stream keeps for node.
func onStream(t *testing.T, c *Controller, node string) uint64 {
	t.Helper()
	s, err := c.js.Stream(context.Background(), spec.DeclarationStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(spec.DeclarationSubject(node)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[spec.DeclarationSubject(node)]
}

func onBus(c *Controller, nkey string) bool {
	for _, u := range c.deps.Bus.Users() {
		if u.NKey == nkey {
			return true
		}
	}
	return false
}

// joinNode enrols node through a token, as a host does.
func joinNode(t *testing.T, c *Controller, node string) {
	t.Helper()
	res, err := c.enrolment.createToken(context.Background(), spec.TokenCreateRequest{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := spec.ParseToken(res.Token)
	if _, err := c.enrolment.enrol(context.Background(), enrolRequest(t, tok, node)); err != nil {
		t.Fatal(err)
	}
}

// TestRemovalFailedHalfWayIsFinishedByRunningItAgain: a removal whose last
// step (the store) fails has already taken the node off the bus, purged its
// declarations and deleted its consumer; the node is shown as being removed
// and sent nothing; running the removal again finishes it.
func TestRemovalFailedHalfWayIsFinishedByRunningItAgain(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	var fs *removalFailing
	c, db := newControllerWith(t, clk, func(db *store.DB) Store { fs = &removalFailing{DB: db}; return fs })
	ctx := context.Background()
	joinNode(t, c, "beta")
	mod := spec.Module{Name: "m", Version: "1", Resources: []spec.Resource{resource("/srv/m")}}
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.Assign(ctx, "m", "beta", nil, clk.Now()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := c.sender.send(ctx, "beta", content{resources: mod.Resources}, resendAll); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.RecordReport(ctx, store.Report{Node: "beta", Seq: 2, Body: []byte(`{"node":"beta","seq":2}`), Received: clk.Now()}, true); err != nil {
		t.Fatal(err)
	}
	beta, _ := db.Node(ctx, "beta")
	if n := onStream(t, c, "beta"); n != 2 || !onBus(c, beta.NKey) {
		t.Fatalf("before removal: %d declarations on the stream, credential on the bus %v", n, onBus(c, beta.NKey))
	}

	fs.fail.Store(true)
	_, err := c.enrolment.removeNode(ctx, spec.NodeRemoveRequest{Name: "beta"})
	if err == nil || !strings.Contains(err.Error(), "only partly removed") || !strings.Contains(err.Error(), "run mesh node remove beta again") {
		t.Fatalf("removal with the store failing: %v, want it to say to run it again", err)
	}
	// Every step before the store's was taken, and a sweep keeps them so.
	if err := c.enrolment.syncUsers(ctx); err != nil {
		t.Fatal(err)
	}
	if onBus(c, beta.NKey) {
		t.Error("the half-removed node's credential is on the bus")
	}
	if n := onStream(t, c, "beta"); n != 0 {
		t.Errorf("the stream keeps %d declarations of the half-removed node", n)
	}
	if _, err := c.js.PushConsumer(ctx, spec.DeclarationStream, "beta"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("the half-removed node's consumer: %v, want it gone", err)
	}
	// It is shown as being removed, and sent nothing.
	st, err := c.status(ctx, spec.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var shown spec.NodeStatus
	for _, n := range st.Nodes {
		if n.Node == "beta" {
			shown = n
		}
	}
	if shown.State != "being removed" || st.AllClear || !strings.Contains(strings.Join(st.Problems, "\n"), "beta is only partly removed") {
		t.Errorf("status of the half-removed node: %+v, problems %q", shown, st.Problems)
	}
	res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"beta"}})
	if err != nil || len(res.Nodes) != 1 || res.Nodes[0].Seq != 0 || !strings.Contains(res.Nodes[0].Error, "only partly removed") {
		t.Errorf("push to the half-removed node: %+v, %v", res, err)
	}
	if n := onStream(t, c, "beta"); n != 0 {
		t.Errorf("a push sent the half-removed node %d declarations", n)
	}
	if _, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "beta"}); err == nil || !strings.Contains(err.Error(), "run mesh node remove beta again") {
		t.Errorf("a token for the half-removed node's name: %v", err)
	}

	// Run again: the steps already taken are no errors, the store's is done.
	fs.fail.Store(false)
	if _, err := c.enrolment.removeNode(ctx, spec.NodeRemoveRequest{Name: "beta"}); err != nil {
		t.Fatalf("removal run again: %v", err)
	}
	if _, err := db.Node(ctx, "beta"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("beta still in the store: %v", err)
	}
	if _, err := db.LastDeclaration(ctx, "beta"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("beta's last declaration still in the store: %v", err)
	}
	if _, err := db.LastReport(ctx, "beta"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("beta's last report still in the store: %v", err)
	}
	if as, err := db.AssignmentsOf(ctx, "beta"); err != nil || len(as) != 0 {
		t.Errorf("beta's assignments after removal: %v %v", as, err)
	}
	if _, err := c.enrolment.removeNode(ctx, spec.NodeRemoveRequest{Name: "beta"}); err == nil || !strings.Contains(err.Error(), `no node called "beta"`) {
		t.Errorf("removing a removed node: %v", err)
	}
}

// TestJoinedAgainStartsFromNothing: declarations the stream kept for a name
// (left by a removal made before removals purged them) are never delivered
// to a node that joins under that name; its first declaration is 1.
func TestJoinedAgainStartsFromNothing(t *testing.T) {
	t.Parallel()
	c, _ := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	for _, body := range []string{`{"node":"gamma","seq":6}`, `{"node":"gamma","seq":7}`} {
		if _, err := c.js.Publish(ctx, spec.DeclarationSubject("gamma"), []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	joinNode(t, c, "gamma")
	if n := onStream(t, c, "gamma"); n != 0 {
		t.Fatalf("the stream keeps %d declarations of the earlier gamma after the new one joined", n)
	}
	if seq, _, err := c.sender.send(ctx, "gamma", content{resources: nil}, resendAll); err != nil || seq != 1 {
		t.Fatalf("first declaration of the new gamma: seq %d, err %v", seq, err)
	}
}

// TestControllersOwnNodeIsNotRemoved: the node whose host runs in the
// controller's process is refused by name, and keeps its credential.
func TestControllersOwnNodeIsNotRemoved(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	c.enrolment.node = "alpha"
	ctx := context.Background()
	_, err := c.enrolment.removeNode(ctx, spec.NodeRemoveRequest{Name: "alpha"})
	var refused refusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "this controller's own machine") {
		t.Fatalf("removing the controller's own node: %v", err)
	}
	alpha, err := db.Node(ctx, "alpha")
	if err != nil || !alpha.Removing.IsZero() || !onBus(c, alpha.NKey) {
		t.Fatalf("after the refusal: %+v %v, on the bus %v", alpha, err, onBus(c, alpha.NKey))
	}
}

// TestRemovalSendsTheNames: a removal sends the roster without the node,
// so its names leave every host without a push; when the mesh cannot be
// composed, the removal still completes, nothing is sent (every host
// keeps the names it has: invariant 1) and the answer says the names
// stay until the next push.
func TestRemovalSendsTheNames(t *testing.T) {
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
	before, seqBefore := rosterOnStream(t, c)
	if got := routeNames(before); got != "web.alpha.internal,web.beta.internal" {
		t.Fatalf("the roster before: %s", got)
	}

	res, err := c.enrolment.removeNode(ctx, spec.NodeRemoveRequest{Name: "beta"})
	if err != nil || res.Roster == nil || res.Roster.Nodes != 2 || res.NamesKept != "" {
		t.Fatalf("remove beta: %+v %v, want the roster of 2 nodes sent", res, err)
	}
	after, seq := rosterOnStream(t, c)
	if got := routeNames(after); got != "web.alpha.internal" || seq != res.Roster.Seq || seq <= seqBefore {
		t.Errorf("the roster after the removal: %s (seq %d, answered %d, before %d), want beta's name gone", got, seq, res.Roster.Seq, seqBefore)
	}
	for _, n := range after.Nodes {
		if n.Name == "beta" {
			t.Errorf("the roster after the removal names beta: %+v", after.Nodes)
		}
	}

	fs.fail.Store(true)
	res, err = c.enrolment.removeNode(ctx, spec.NodeRemoveRequest{Name: "gamma"})
	if err != nil || res.Roster != nil || !strings.Contains(res.NamesKept, "every host keeps the names it has, gamma's among them, until the next mesh push") {
		t.Fatalf("remove gamma with the mesh not composing: %+v %v, want it done and the names said kept", res, err)
	}
	if _, err := db.Node(ctx, "gamma"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("gamma still in the store: %v", err)
	}
	if kept, seqKept := rosterOnStream(t, c); seqKept != seq || len(kept.Nodes) != len(after.Nodes) {
		t.Errorf("a roster was sent from a failed composition: seq %d (was %d), nodes %+v", seqKept, seq, kept.Nodes)
	}
}
