package mesh

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// statusOf returns the status, failing the test on error.
func statusOf(t *testing.T, c *Controller) spec.StatusResult {
	t.Helper()
	res, err := c.status(context.Background(), spec.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func nodeStatus(res spec.StatusResult, node string) spec.NodeStatus {
	for _, n := range res.Nodes {
		if n.Node == node {
			return n
		}
	}
	return spec.NodeStatus{}
}

// TestAllClear holds invariant 7: the all-clear is given only when every
// node is heard, applied the latest, has nothing pending, no failure and no
// hold; each of those alone takes it away, and status says which.
func TestAllClear(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	heartbeat := func(node string, applied uint64, version string) {
		t.Helper()
		if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: node, AppliedSeq: applied, HostVersion: version, Protocol: spec.Protocol}, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	report := func(node string, seq uint64, results ...spec.ResourceResult) {
		t.Helper()
		body := mustJSON(t, spec.Report{Node: node, Seq: seq, Results: results})
		if err := db.RecordReport(ctx, store.Report{Node: node, Seq: seq, Body: body, Received: clk.Now()}, true); err != nil {
			t.Fatal(err)
		}
	}
	push := func() {
		t.Helper()
		if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	wantClear := func(clear bool, problem string) {
		t.Helper()
		res := statusOf(t, c)
		if res.AllClear != clear {
			t.Fatalf("all clear %v, want %v; problems %q", res.AllClear, clear, res.Problems)
		}
		if problem != "" && !strings.Contains(strings.Join(res.Problems, "\n"), problem) {
			t.Fatalf("problems %q do not say %q", res.Problems, problem)
		}
	}

	// A node never heard is never current, whatever was sent.
	wantClear(false, "alpha has never been heard")
	if st := nodeStatus(statusOf(t, c), "alpha"); st.State != "never heard" {
		t.Fatalf("a node never heard is %q", st.State)
	}

	heartbeat("alpha", 0, "v1")
	wantClear(true, "") // heard, nothing to send, nothing sent

	mod := spec.Module{Name: "m", Version: "1", Resources: []spec.Resource{resource("/srv")}}
	mod.Resources[0].Module, mod.Resources[0].Name = "m", spec.ResourceName("m", spec.KindDirectory, "/srv")
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.Assign(ctx, "m", "alpha", nil, clk.Now()); err != nil {
		t.Fatal(err)
	}
	wantClear(false, "alpha has changes pending")

	push()
	wantClear(false, "alpha has not reported applying declaration 1")
	if st := nodeStatus(statusOf(t, c), "alpha"); st.State != "applying" {
		t.Fatalf("sent and not applied: %q", st.State)
	}

	report("alpha", 1, spec.ResourceResult{Name: "m:directory:/srv", Outcome: spec.Created})
	heartbeat("alpha", 1, "v1")
	wantClear(true, "")

	// An idle, current node stays current: never "not reported".
	clk.Add(20 * time.Second)
	heartbeat("alpha", 1, "v1")
	clk.Add(20 * time.Second)
	if st := nodeStatus(statusOf(t, c), "alpha"); st.State != "current" || st.Silent {
		t.Fatalf("an idle current node: %+v", st)
	}

	// Silent for more than three heartbeats.
	clk.Add(time.Minute)
	wantClear(false, "alpha has not been heard for")
	heartbeat("alpha", 1, "v1")
	wantClear(true, "")

	// A failed resource.
	report("alpha", 1, spec.ResourceResult{Name: "m:directory:/srv", Outcome: spec.Failed, Error: "mkdir /srv: read-only file system"})
	wantClear(false, "alpha failed 1 resource")
	if f := nodeStatus(statusOf(t, c), "alpha").Failures; len(f) != 1 || !strings.Contains(f[0], "read-only file system") {
		t.Fatalf("failures %q", f)
	}
	report("alpha", 1, spec.ResourceResult{Name: "m:directory:/srv", Outcome: spec.Unchanged})
	wantClear(true, "")

	// A hold.
	if _, err := c.hold(ctx, spec.HoldRequest{Node: "alpha", Hold: true, Reason: "disk swap"}); err != nil {
		t.Fatal(err)
	}
	wantClear(false, "alpha is held (disk swap)")
	res, err := c.push(ctx, spec.PushRequest{})
	if err != nil || len(res.Nodes) != 1 || !res.Nodes[0].Held || res.Nodes[0].Seq != 0 {
		t.Fatalf("push to a held node: %+v %v", res, err)
	}
	if _, err := c.hold(ctx, spec.HoldRequest{Node: "alpha"}); err != nil {
		t.Fatal(err)
	}
	wantClear(true, "")

	// Versions that differ are a split, in no order.
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "10.0.0.2", NKey: "UBETA", Joined: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	heartbeat("beta", 0, "v0")
	st := statusOf(t, c)
	if len(st.Versions) != 2 || strings.Join(st.Versions["v1"], ",") != "alpha" || strings.Join(st.Versions["v0"], ",") != "beta" {
		t.Fatalf("versions %v", st.Versions)
	}
	for _, p := range st.Problems {
		if strings.Contains(p, "older") || strings.Contains(p, "newer") || strings.Contains(p, "behind") {
			t.Fatalf("a version order was claimed: %q", p)
		}
	}
}

// TestStatusComparesRecordedDigests: whether a node has changes pending is
// told by the digest of content recorded with its last declaration, not by
// decoding and encoding again what was sent (a body that does not even
// decode, recorded with the right digest, is not pending); a declaration
// recorded before digests were kept is decoded, as before.
func TestStatusComparesRecordedDigests(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	mod := spec.Module{Name: "m", Version: "1", Resources: []spec.Resource{resource("/srv")}}
	mod.Resources[0].Module, mod.Resources[0].Name = "m", spec.ResourceName("m", spec.KindDirectory, "/srv")
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if err := db.Assign(ctx, "m", "alpha", nil, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		t.Fatal(err)
	}
	sent, err := db.LastDeclaration(ctx, "alpha")
	if err != nil || sent.Content == "" {
		t.Fatalf("the declaration sent was recorded without its content's digest: %+v, %v", sent, err)
	}
	var decl spec.Declaration
	if err := spec.Decode(sent.Body, &decl); err != nil {
		t.Fatal(err)
	}
	other, _ := json.Marshal(spec.Declaration{Mesh: "m", Node: "alpha", Resources: []spec.Resource{}, RosterRef: decl.RosterRef})
	seq := sent.Seq
	record := func(body []byte, content string) {
		t.Helper()
		seq++
		if err := db.RecordDeclaration(ctx, store.Declaration{Node: "alpha", Seq: seq, Body: body, Sig: sent.Sig, Content: content, Sent: clk.Now(), Expires: clk.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		body    []byte
		content string
		pending bool
	}{
		{"as pushed", sent.Body, sent.Content, false},
		{"a body that does not decode, with the digest of what would be sent", []byte("not json"), sent.Content, false},
		{"the same body with the digest of other content", sent.Body, "sha256:other", true},
		{"no digest recorded: the body, as sent", sent.Body, "", false},
		{"no digest recorded: a body holding other content", other, "", true},
	} {
		record(tc.body, tc.content)
		if st := nodeStatus(statusOf(t, c), "alpha"); st.Pending != tc.pending {
			t.Errorf("%s: pending %v, want %v", tc.name, st.Pending, tc.pending)
		}
	}
}
