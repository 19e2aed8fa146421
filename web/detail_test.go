package web

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestNodesPageShowsEachColumn: per node, how long ago it was heard
// (ticking from data-age-ms), applied against the latest sequence, its
// version and the split, its architecture, its failures, its hold, and
// its overlay address and paths when the overlay is on.
func TestNodesPageShowsEachColumn(t *testing.T) {
	now := time.Now()
	src := newFake(3, now)
	src.change(func(st *spec.StatusResult, nodes *[]spec.Node) {
		n := &st.Nodes[1]
		n.AppliedSeq, n.SentSeq, n.State = 2, 5, "applying"
		n.HostVersion = "def456789012345"
		st.Versions = map[string][]string{"abc123": {"node0000", "node0002"}, "def456789012345": {"node0001"}}
		n.Failures = []string{"web:file:/a: denied", "web:file:/b: denied", "web:file:/c: denied", "web:file:/d: denied"}
		st.Nodes[2].Held, st.Nodes[2].HeldReason = true, "disk swap"
		(*nodes)[1].Facts.Arch = "arm64"
	})
	src.overlay = spec.OverlayShowResult{CIDR: "100.96.0.0/16", Members: []spec.NodeOverlay{{Node: "node0000", IP: "100.96.0.1", Mode: "relay",
		Error: "port 51820 taken", Peers: []spec.OverlayPath{{Node: "node0001"}, {Node: "node0002", Via: "node0001"}}}}}
	_, srv := serve(t, src, nil)
	_, body, _ := get(t, nil, srv.URL+"/nodes")
	for _, want := range []string{
		`<span data-age-ms="1000">1s ago</span>`,
		`<span class="applied">2</span> / <span class="sent">5</span>`, "applying",
		`<code title="def456789012345">def456789012</code>`, "Version split", "<code>abc123</code>: 2 node(s)", "<code>def456789012</code>: 1 node(s)",
		"<td>arm64</td>", "<td>amd64</td>",
		`4<br><span class="muted">web:file:/a: denied</span>`, "web:file:/c: denied", `<a href="/nodes/node0001">…and 1 more</a>`,
		"held: disk swap",
		"<th>Overlay</th>", "100.96.0.1 · relay · 1 direct, 1 relayed", "port 51820 taken",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("nodes page without %q", want)
		}
	}
	if strings.Contains(body, "web:file:/d: denied") {
		t.Error("nodes page lists more than three failures of a node")
	}
	if t.Failed() {
		t.Log(body)
	}
}

// TestNodePageShowsWhatTheStoreKeeps: a node's facts, every resource of
// its last report with its state and when it last changed as far as that
// report tells, the report itself and that no earlier one is kept, its
// certificates' expiry, and the grants it provides or consumes.
func TestNodePageShowsWhatTheStoreKeeps(t *testing.T) {
	now := time.Now()
	src := newFake(3, now)
	at := now.Add(-time.Hour)
	src.change(func(st *spec.StatusResult, nodes *[]spec.Node) {
		n := &(*nodes)[1]
		n.Facts.Kernel, n.Facts.Cores = "6.1.0-18", 4
		n.LastReport = &spec.Report{Node: n.Name, Seq: 3, Time: at, Writes: 2, ApplyMicros: 12345, Omitted: 7, Results: []spec.ResourceResult{
			{Name: "web:file:/etc/a", Kind: "file", Outcome: spec.Changed},
			{Name: "web:file:/etc/b", Kind: "file", Outcome: spec.Unchanged},
			{Name: "web:container:app", Kind: "container", Outcome: spec.Failed, Error: "image not found"},
		}}
		st.Nodes[1].Pending = true
		st.Nodes[1].Fallbacks = []spec.Fallback{{Digest: "feedfacecafe0001", Reason: "exited 2", At: at}}
	})
	src.grants = []spec.GrantInfo{
		{Provider: "node0000", Consumer: "web-node0001", Module: "web", Node: "node0001", Grant: "db", MintedAt: at},
		{Provider: "node0001", Consumer: "api-node0002", Module: "api", Node: "node0002", Grant: "cache", MintedAt: at},
		{Provider: "node0000", Consumer: "api-node0002", Module: "api", Node: "node0002", Grant: "queue", MintedAt: at},
	}
	_, srv := serve(t, src, nil)
	_, body, _ := get(t, nil, srv.URL+"/nodes/node0001")
	for _, want := range []string{
		"<td>6.1.0-18</td>", "(4 cores)", "<td>amd64</td>",
		"declaration 3, reported " + when(at), "2 write(s), applied in 12.3ms", "7 more result(s) of this report were not kept",
		`<td>web:file:/etc/a</td><td>file</td><td>changed</td><td class="changed">` + when(at) + "</td>",
		`<td>web:file:/etc/b</td><td>file</td><td>unchanged</td><td class="changed">before ` + when(at) + "</td>",
		`<td>container</td><td>failed</td><td class="changed">-</td><td>image not found</td>`,
		"keeps only a node's last report",
		`<table id="certs">`, "node0001.internal", "(in 48h0m0s)",
		`<td>db</td><td><a href="/nodes/node0000">node0000</a></td><td>web-node0001 (web on <a href="/nodes/node0001">node0001</a>)</td>`,
		`<td>cache</td>`, "credentials are never shown",
		"pending: what the mesh would send differs", "<code>feedfacecafe</code> at " + when(at) + ": exited 2",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("node page without %q", want)
		}
	}
	if strings.Contains(body, "<td>queue</td>") {
		t.Error("node page lists a grant between two other nodes")
	}
	if t.Failed() {
		t.Log(body)
	}
	_, body, _ = get(t, nil, srv.URL+"/nodes/node0000")
	if !strings.Contains(body, "No report yet.") || !strings.Contains(body, "keeps only a node's last report") {
		t.Errorf("the page of a node with no report:\n%s", body)
	}
}

// TestActivityPageShowsTheRoll: the pushes and rolls page shows the
// latest roll and each of its nodes, linked, with its state and cause.
func TestActivityPageShowsTheRoll(t *testing.T) {
	now := time.Now()
	src := newFake(2, now)
	started := now.Add(-time.Hour)
	src.change(func(st *spec.StatusResult, _ *[]spec.Node) {
		st.Roll = &spec.Roll{ID: 7, Digest: "0123456789abcdef", State: spec.RollFailed, Cause: "node0001 fell back", Started: started, Nodes: []spec.RollNode{
			{Node: "node0000", State: "healthy", Started: &started, Ended: &now},
			{Node: "node0001", State: spec.RollFailed, Cause: "exited 2", Started: &started},
		}}
	})
	_, srv := serve(t, src, nil)
	_, body, _ := get(t, nil, srv.URL+"/activity")
	for _, want := range []string{"<h2>Roll 7</h2>", "<code>0123456789ab</code>: failed (node0001 fell back), started " + when(started),
		`<td><a href="/nodes/node0000">node0000</a></td><td>healthy</td><td>` + when(started) + "</td><td>" + when(now) + "</td>",
		`<td><a href="/nodes/node0001">node0001</a></td><td>failed</td>`, "<td>exited 2</td>", "Nothing pushed"} {
		if !strings.Contains(body, want) {
			t.Errorf("activity page without %q:\n%s", want, body)
		}
	}
}

// TestModulesPageShowsAssignments: each module with its version, its
// resources, when it was registered, and the nodes it is assigned to,
// linked; one assigned nowhere says so.
func TestModulesPageShowsAssignments(t *testing.T) {
	_, srv := serve(t, &modular{newFake(2, time.Now())}, nil)
	_, body, _ := get(t, nil, srv.URL+"/modules")
	for _, want := range []string{`<td>web<br><span class="muted">a site</span></td><td>3<br><span class="muted">previously 2</span></td><td>2</td>`,
		`<a href="/nodes/node0000">node0000</a>, <a href="/nodes/node0001">node0001</a>`, "<td>idle</td>", "nowhere"} {
		if !strings.Contains(body, want) {
			t.Errorf("modules page without %q:\n%s", want, body)
		}
	}
}

// modular is a fake with two modules, one assigned nowhere.
type modular struct{ *fakeSource }

func (modular) Modules(context.Context) ([]spec.ModuleInfo, error) {
	return []spec.ModuleInfo{{Name: "web", Description: "a site", Version: "3", Previous: "2", Resources: 2, Nodes: []string{"node0000", "node0001"}},
		{Name: "idle", Version: "1", Resources: 1}}, nil
}
