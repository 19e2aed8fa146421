package mesh

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

func resource(path string) spec.Resource {
	return spec.Resource{Name: spec.ResourceName("m", spec.KindDirectory, path), Kind: spec.KindDirectory, Module: "m",
		Spec: &spec.DirectorySpec{Path: path, Mode: 0o755}}
}

// lastOnStream reads the last declaration of node on the stream.
func lastOnStream(t *testing.T, c *Controller, node string) spec.Declaration {
	t.Helper()
	msg, err := c.js.Stream(context.Background(), spec.DeclarationStream)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := msg.GetLastMsgForSubject(context.Background(), spec.DeclarationSubject(node))
	if err != nil {
		t.Fatal(err)
	}
	var d spec.Declaration
	if err := spec.Decode(raw.Data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSequence: sequences rise per node, and start above what the node
// reports having applied, so a restored store never wedges a host.
func TestSequence(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	for want := uint64(1); want <= 3; want++ {
		seq, _, err := c.sender.send(ctx, "alpha", content{resources: []spec.Resource{resource("/a")}}, resendAll)
		if err != nil || seq != want {
			t.Fatalf("send %d: seq %d, err %v", want, seq, err)
		}
	}
	// The host reports having applied 40 (the store was restored from an
	// older copy): the next is 41.
	if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: 40, Protocol: spec.Protocol}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if seq, _, err := c.sender.send(ctx, "alpha", content{resources: nil}, resendAll); err != nil || seq != 41 {
		t.Fatalf("after a report of 40: seq %d, err %v", seq, err)
	}
	if d := lastOnStream(t, c, "alpha"); d.Seq != 41 || d.Node != "alpha" {
		t.Fatalf("on the stream: %+v", d)
	}
}

// TestExpiredIsResentAsSent: a host that returns after its pending
// declaration expired is re-sent the last sent content, re-signed under a
// new sequence, without recomposing.
func TestExpiredIsResentAsSent(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	sent := []spec.Resource{resource("/as-sent")}
	seq, _, err := c.sender.send(ctx, "alpha", content{resources: sent}, resendAll)
	if err != nil {
		t.Fatal(err)
	}
	// What the mesh would compose now differs: nobody pushed it, so it must
	// not travel.
	mod := spec.Module{Name: "m", Version: "2", Resources: []spec.Resource{resource("/unpushed")}}
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.Assign(ctx, "m", "alpha", nil, clk.Now()); err != nil {
		t.Fatal(err)
	}
	hb := spec.Heartbeat{Node: "alpha", AppliedSeq: 0, Protocol: spec.Protocol}

	// Not expired yet: nothing is sent.
	if err := c.sender.resendIfExpired(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if d, _ := db.LastDeclaration(ctx, "alpha"); d.Seq != seq {
		t.Fatalf("re-sent before expiry: last %d", d.Seq)
	}
	clk.Add(spec.DefaultExpiry + time.Minute)
	if err := c.sender.resendIfExpired(ctx, hb); err != nil {
		t.Fatal(err)
	}
	d := lastOnStream(t, c, "alpha")
	if d.Seq != seq+1 || len(d.Resources) != 1 || d.Resources[0].Target() != "/as-sent" {
		t.Fatalf("re-sent %+v, want sequence %d with what was sent", d, seq+1)
	}
	if !d.Expires.After(clk.Now()) {
		t.Fatalf("re-sent declaration expires %v, already past", d.Expires)
	}
	// A host that applied it is not re-sent anything.
	hb.AppliedSeq = seq + 1
	clk.Add(spec.DefaultExpiry + time.Minute)
	if err := c.sender.resendIfExpired(ctx, hb); err != nil {
		t.Fatal(err)
	}
	if last, _ := db.LastDeclaration(ctx, "alpha"); last.Seq != seq+1 {
		t.Fatalf("re-sent to a host that applied it: last %d", last.Seq)
	}
}

// TestExpiredWatchersAreDropped: a push waiting for a node that never
// answers is forgotten once it expires.
func TestExpiredWatchersAreDropped(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, _ := newController(t, clk)
	c.watches.watch("alpha", "p1", spec.OperatorInbox+".x", false)
	c.watches.watch("alpha", "p2", spec.OperatorInbox+".y", false)
	c.watches.dropExpiredWatchers()
	if len(c.watches.byNode["alpha"]) != 2 {
		t.Fatalf("dropped live watchers: %d left", len(c.watches.byNode["alpha"]))
	}
	clk.Add(2 * time.Hour)
	c.watches.dropExpiredWatchers()
	if len(c.watches.byNode) != 0 {
		t.Fatalf("%d nodes still have expired watchers", len(c.watches.byNode))
	}
}

// sendFailStore is the real store but for the declarations a test makes
// fail, node by node or all at once: the seam where a push's store write
// fails.
type sendFailStore struct {
	*store.DB
	record func(ctx context.Context, db *store.DB, ds []store.Declaration) (map[string]error, error)
}

func (s sendFailStore) RecordDeclarations(ctx context.Context, ds []store.Declaration) (map[string]error, error) {
	return s.record(ctx, s.DB, ds)
}

// TestPushFailureIsTheNodes: a push records every node's declaration in
// one write and then publishes them. A record that fails for one node
// stops no other node; a write that fails as a whole (a busy store) sends
// nothing; a caller gone after the write still has every recorded
// declaration published. The push's answer lists exactly the nodes whose
// declaration was published, each with its sequence.
func TestPushFailureIsTheNodes(t *testing.T) {
	type want struct {
		seq   uint64 // 0: not sent
		error string
	}
	for _, tc := range []struct {
		name   string
		record func(cancel context.CancelFunc) func(ctx context.Context, db *store.DB, ds []store.Declaration) (map[string]error, error)
		want   map[string]want
	}{
		{
			name: "one node's record fails",
			record: func(context.CancelFunc) func(ctx context.Context, db *store.DB, ds []store.Declaration) (map[string]error, error) {
				return func(ctx context.Context, db *store.DB, ds []store.Declaration) (map[string]error, error) {
					var others []store.Declaration
					for _, d := range ds {
						if d.Node != "beta" {
							others = append(others, d)
						}
					}
					failed, err := db.RecordDeclarations(ctx, others)
					if err == nil {
						failed["beta"] = errors.New("record declaration 1 of node \"beta\": sequence 1 is not above the last sent, 7")
					}
					return failed, err
				}
			},
			want: map[string]want{"alpha": {seq: 1}, "beta": {error: "not above the last sent"}, "gamma": {seq: 1}},
		},
		{
			name: "a busy store sends nothing",
			record: func(context.CancelFunc) func(ctx context.Context, db *store.DB, ds []store.Declaration) (map[string]error, error) {
				return func(ctx context.Context, db *store.DB, ds []store.Declaration) (map[string]error, error) {
					return nil, fmt.Errorf("record %d declarations: %w", len(ds), store.ErrBusy)
				}
			},
			want: map[string]want{"alpha": {error: "the store is busy (record declaration 1 of node \"alpha\""}, "beta": {error: "the store is busy"},
				"gamma": {error: "nothing was sent to this node; run the push again once the store is free"}},
		},
		{
			name: "a caller gone after the write",
			record: func(cancel context.CancelFunc) func(ctx context.Context, db *store.DB, ds []store.Declaration) (map[string]error, error) {
				return func(ctx context.Context, db *store.DB, ds []store.Declaration) (map[string]error, error) {
					failed, err := db.RecordDeclarations(ctx, ds)
					cancel()
					return failed, err
				}
			},
			want: map[string]want{"alpha": {seq: 1}, "beta": {seq: 1}, "gamma": {seq: 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c, db := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store {
				return sendFailStore{DB: db, record: tc.record(cancel)}
			})
			for _, n := range []string{"beta", "gamma"} {
				if err := db.AddNode(ctx, store.Node{Name: n, Address: "127.0.0.9", NKey: "U" + n, Joined: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			res, err := c.push(ctx, spec.PushRequest{})
			if err != nil {
				t.Fatalf("push: %v", err)
			}
			if len(res.Nodes) != 3 {
				t.Fatalf("push lists %d nodes: %+v", len(res.Nodes), res.Nodes)
			}
			stream, err := c.js.Stream(context.Background(), spec.DeclarationStream)
			if err != nil {
				t.Fatal(err)
			}
			for _, pn := range res.Nodes {
				w := tc.want[pn.Node]
				if pn.Seq != w.seq || !strings.Contains(pn.Error, w.error) || (w.error == "") != (pn.Error == "") {
					t.Errorf("%s: seq %d error %q, want seq %d error with %q", pn.Node, pn.Seq, pn.Error, w.seq, w.error)
				}
				// Listed with a sequence exactly when it is on the stream, and
				// recorded exactly then.
				msg, err := stream.GetLastMsgForSubject(context.Background(), spec.DeclarationSubject(pn.Node))
				if published := err == nil; published != (pn.Seq != 0) {
					t.Errorf("%s: listed with sequence %d, on the stream: %v (%v)", pn.Node, pn.Seq, published, err)
				} else if published {
					var d spec.Declaration
					if err := spec.Decode(msg.Data, &d); err != nil || d.Seq != pn.Seq {
						t.Errorf("%s: on the stream %d, listed %d (%v)", pn.Node, d.Seq, pn.Seq, err)
					}
				}
				last, err := db.LastDeclaration(context.Background(), pn.Node)
				if recorded := err == nil; recorded != (pn.Seq != 0) || last.Seq != pn.Seq {
					t.Errorf("%s: listed with sequence %d, recorded %d (%v)", pn.Node, pn.Seq, last.Seq, err)
				}
			}
		})
	}
}

// TestPushPublishesInOneBatch: a push's declarations reach the stream as
// one atomic batch; a stream that refuses batches (made before it allowed
// them, or changed since) still gets every declaration, one by one.
func TestPushPublishesInOneBatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		atomic  bool
		batched bool
	}{
		{name: "batches allowed", atomic: true, batched: true},
		{name: "batches refused", atomic: false, batched: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, db := newController(t, &clock{now: time.Now()})
			ctx := context.Background()
			for _, n := range []string{"beta", "gamma"} {
				if err := db.AddNode(ctx, store.Node{Name: n, Address: "127.0.0.9", NKey: "U" + n, Joined: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			s, err := c.js.Stream(ctx, spec.DeclarationStream)
			if err != nil {
				t.Fatal(err)
			}
			cfg := s.CachedInfo().Config
			cfg.AllowAtomicPublish = tc.atomic
			if _, err := c.js.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			res, err := c.push(ctx, spec.PushRequest{Force: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, pn := range res.Nodes {
				if pn.Error != "" || pn.Seq == 0 {
					t.Fatalf("%s: %+v, want sent", pn.Node, pn)
				}
				raw, err := s.GetLastMsgForSubject(ctx, spec.DeclarationSubject(pn.Node))
				if err != nil {
					t.Fatalf("%s: not on the stream: %v", pn.Node, err)
				}
				if batched := raw.Header.Get(batchIDHeader) != ""; batched != tc.batched {
					t.Errorf("%s: published in a batch: %v, want %v", pn.Node, batched, tc.batched)
				}
				var d spec.Declaration
				if err := spec.Decode(raw.Data, &d); err != nil || d.Seq != pn.Seq {
					t.Errorf("%s: on the stream %d, listed %d (%v)", pn.Node, d.Seq, pn.Seq, err)
				}
			}
		})
	}
}

// TestBatchEnds: a push's declarations are cut into atomic batches of at
// most n declarations and maxBytes, a declaration larger than maxBytes
// alone in its own.
func TestBatchEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
		want  []int
	}{
		{"none", nil, nil},
		{"under both", []int{1, 1, 1}, []int{3}},
		{"by count", []int{1, 1, 1, 1, 1, 1, 1}, []int{3, 6, 7}},
		{"by bytes", []int{4, 4, 4, 1}, []int{2, 4}},
		{"one over the bytes alone", []int{1, 20, 1}, []int{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := batchEnds(tc.sizes, 3, 9); !slices.Equal(got, tc.want) {
				t.Errorf("batchEnds(%v, 3, 9) = %v, want %v", tc.sizes, got, tc.want)
			}
		})
	}
}
