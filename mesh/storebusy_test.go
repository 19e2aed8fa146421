package mesh

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// lockStore holds c's store file with an exclusive lock from a second
// connection, as `sqlite3 mesh.db 'BEGIN EXCLUSIVE;'` does, until the
// returned function lets it go.
func lockStore(t *testing.T, c *Controller) (release func()) {
	t.Helper()
	dir, ok := controllerDirs.Load(c)
	if !ok {
		t.Fatal("the controller's directory is not known")
	}
	path := filepath.Join(dir.(string), DBFile)
	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if done {
			return
		}
		done = true
		if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.Error(err)
		}
		conn.Close()
		other.Close()
	}
	t.Cleanup(release)
	return release
}

// apiCall makes an operator API call on the bus, as the CLI does, so it is
// audited.
func apiCall(t *testing.T, op *nats.Conn, verb string, req any) spec.Reply {
	t.Helper()
	m, err := op.Request(spec.APIPrefix+verb, mustJSON(t, req), time.Minute)
	if err != nil {
		t.Fatalf("%s: no answer: %v", verb, err)
	}
	var r spec.Reply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// busy says whether s names the store busy, in mesh's words or SQLite's.
func busy(s string) bool {
	return strings.Contains(s, "the store is busy") || strings.Contains(s, "SQLITE_BUSY")
}

// pushAudits are the outcomes of the push calls audited so far.
func pushAudits(t *testing.T, db *store.DB) []string {
	t.Helper()
	es, err := db.AuditSince(context.Background(), time.Time{}, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if e.Verb == spec.Push.Name {
			out = append(out, e.Outcome)
		}
	}
	return out
}

// TestStoreBusyIsNotSilentNodes: while another connection holds the store
// with an exclusive lock, a node that heartbeats is shown heard (as the
// controller heard it), not silent; status names the busy store and gives
// no all-clear; a push then fails on the store and is audited as failed,
// not ok. Once the lock goes, the heartbeats are recorded and status says
// nothing of the store.
func TestStoreBusyIsNotSilentNodes(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now().Truncate(time.Second)}
	// A write gives up on the held store after 250 ms, not the default
	// 5 s: the same failures, sooner.
	c, db := newControllerOpts(t, clk, nil, func(*Config) {}, store.Options{BusyTimeout: 250 * time.Millisecond})
	ctx := context.Background()
	beat := func() {
		t.Helper()
		hb := mustJSON(t, spec.Heartbeat{Node: "alpha", Time: clk.Now(), Protocol: spec.Protocol, IntervalMS: 1000})
		if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindHeartbeat), hb); err != nil {
			t.Fatal(err)
		}
	}
	beat()
	poll.Until(t, 10*time.Second, "alpha's heartbeat recorded", func() error {
		n, err := db.Node(ctx, "alpha")
		if err == nil && n.LastHeard.Equal(clk.Now()) {
			return nil
		}
		return fmt.Errorf("last heard %v, %v", n.LastHeard, err)
	})

	release := lockStore(t, c)
	clk.Add(time.Minute) // the store's record of alpha is a minute old: silent, were it believed
	beat()
	poll.Until(t, 30*time.Second, "status names the busy store and alpha heard", func() error {
		res, err := c.status(ctx, spec.StatusRequest{})
		if err != nil {
			return fmt.Errorf("status: %v", err)
		}
		st := nodeStatus(res, "alpha")
		ok := strings.HasPrefix(res.StoreBusy, "the store is busy since ") && strings.Contains(res.StoreBusy, "heartbeats are not being recorded") &&
			!st.Silent && st.LastHeard != nil && st.LastHeard.Equal(clk.Now()) && !res.AllClear &&
			len(res.Problems) > 0 && res.Problems[0] == res.StoreBusy
		if ok {
			return nil
		}
		return fmt.Errorf("store %q, alpha heard %s silent %v, all clear %v, problems %q", res.StoreBusy, st.Heard, st.Silent, res.AllClear, res.Problems)
	})
	if n, err := db.Node(ctx, "alpha"); err != nil || n.LastHeard.Equal(clk.Now()) {
		t.Fatalf("alpha's heartbeat recorded while the store was held: %v %v", n.LastHeard, err)
	}
	// Node list, node show and the pages hear alpha as status does: a
	// push's roster wait, which reads node list, does not call it silent.
	list, err := c.listNodes(ctx, spec.NodeListRequest{})
	if err != nil {
		t.Fatalf("node list while the store is held: %v", err)
	}
	show, err := c.showNode(ctx, spec.NodeShowRequest{Name: "alpha"})
	if err != nil {
		t.Fatalf("node show while the store is held: %v", err)
	}
	pages, err := View{c}.Nodes(ctx)
	if err != nil {
		t.Fatalf("the pages' nodes while the store is held: %v", err)
	}
	for _, v := range []struct {
		verb  string
		nodes []spec.Node
	}{{"node list", list.Nodes}, {"node show", []spec.Node{show.Node}}, {"the pages", pages}} {
		if len(v.nodes) != 1 || v.nodes[0].LastHeard == nil || !v.nodes[0].LastHeard.Equal(clk.Now()) || v.nodes[0].HeardAgo != "0s" || v.nodes[0].HeartbeatMS != 1000 ||
			clk.Now().Sub(*v.nodes[0].LastHeard) > time.Duration(v.nodes[0].SilentAfterMS)*time.Millisecond {
			t.Fatalf("%s while the store is held: %+v, want alpha heard now, beating every second", v.verb, v.nodes)
		}
	}

	// The metrics count alpha heard: a dashboard does not alert on nodes
	// the store could not record.
	if heard := gatheredGauge(t, c, "mesh_nodes_heard"); heard != 1 {
		t.Fatalf("mesh_nodes_heard while the store is held: %v, want 1", heard)
	}

	// A push while the store is held fails on it, and is audited so.
	op := operatorConn(t, c)
	r := apiCall(t, op, spec.Push.Name, spec.PushRequest{Nodes: []string{"alpha"}, Progress: spec.OperatorInbox + ".p", Force: true})
	if r.Error == "" {
		var res spec.PushResult
		if err := json.Unmarshal(r.Result, &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Nodes) != 1 || !busy(res.Nodes[0].Error) {
			t.Fatalf("push while the store is held: %+v, want alpha not sent, the store busy", res)
		}
	} else if !busy(r.Error) {
		t.Fatalf("push while the store is held: %s, want the store busy", r.Error)
	}

	release()
	beat()
	poll.Until(t, 30*time.Second, "the push audited, failed", func() error {
		got := pushAudits(t, db)
		if len(got) == 1 && strings.HasPrefix(got[0], "failed: alpha (") && busy(got[0]) {
			return nil
		}
		return fmt.Errorf("push audits %q", got)
	})
	poll.Until(t, 30*time.Second, "heartbeats recorded again", func() error {
		res := statusOf(t, c)
		n, err := db.Node(ctx, "alpha")
		if res.StoreBusy == "" && err == nil && n.LastHeard.Equal(clk.Now()) {
			return nil
		}
		return fmt.Errorf("store %q, recorded %v", res.StoreBusy, n.LastHeard)
	})
}

// TestPushAuditedAsItsOutcome: a push that sent some nodes and not others
// is audited "partial", naming those not sent and why; one that sent none
// "failed"; one that sent every node "ok".
func TestPushAuditedAsItsOutcome(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	joinNode(t, c, "beta")
	if _, err := c.hold(context.Background(), spec.HoldRequest{Node: "beta", Hold: true, Reason: "audit test"}); err != nil {
		t.Fatal(err)
	}
	op := operatorConn(t, c)
	push := func(nodes ...string) {
		t.Helper()
		if r := apiCall(t, op, spec.Push.Name, spec.PushRequest{Nodes: nodes, Progress: spec.OperatorInbox + ".p", Force: true}); r.Error != "" {
			t.Fatalf("push %v: %s", nodes, r.Error)
		}
	}
	push()
	push("beta")
	push("alpha")
	var got []string
	poll.Until(t, 10*time.Second, "three pushes audited", func() error {
		got = pushAudits(t, db)
		if len(got) == 3 {
			return nil
		}
		return fmt.Errorf("push audits %q", got)
	})
	if !strings.HasPrefix(got[0], "partial: beta (held since ") || !strings.Contains(got[0], "audit test") {
		t.Errorf("push to alpha and held beta audited %q, want partial naming beta", got[0])
	}
	if !strings.HasPrefix(got[1], "failed: beta (held since ") {
		t.Errorf("push to held beta audited %q, want failed naming beta", got[1])
	}
	if got[2] != "ok" {
		t.Errorf("push to alpha audited %q, want ok", got[2])
	}
}

// gatheredGauge is the value of the gauge name c's registry gathers.
func gatheredGauge(t *testing.T, c *Controller, name string) float64 {
	t.Helper()
	mfs, err := c.registry.Gather()
	if err != nil {
		t.Fatalf("gather the metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series %s gathered", name)
	return 0
}
