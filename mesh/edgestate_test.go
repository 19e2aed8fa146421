package mesh

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// publicOf is public name name as status shows it.
func publicOf(res spec.StatusResult, name string) (spec.PublicStatus, bool) {
	for _, ps := range res.Public {
		if ps.Name == name {
			return ps, true
		}
	}
	return spec.PublicStatus{}, false
}

// TestStatusShowsEdgeCertificates: status lists the roster's public
// names, "no edge serves it" and no problem while no edge is assigned;
// once node alpha is an edge, each with alpha's certificate as it
// reports it. A name not yet reported, failing, or whose certificate
// expires within a week and was not renewed stops the all-clear, saying
// the error and when it is tried again; a valid one with a renewal error
// far from expiry does not. Lying reports (too many names, another
// node's, a state no host sends, from a node declared no edge) change
// nothing; names not in the roster are not shown and a huge error is
// clipped. An edge unassigned is forgotten.
func TestStatusShowsEdgeCertificates(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "10.0.0.2", NKey: "Ubeta", Joined: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	edge := spec.Module{Name: "edge", Version: "1", Resources: []spec.Resource{{Name: spec.ResourceName("edge", spec.KindEdge, "edge"), Kind: spec.KindEdge, Module: "edge",
		Spec: &spec.EdgeSpec{Name: "edge", HTTP: spec.EdgeHTTP, HTTPS: spec.EdgeHTTPS, ACMECA: spec.EdgeACMECA}}}}
	web := spec.Module{Name: "web", Version: "1", Routes: []spec.Route{{Name: "web", Port: 8080, Public: []string{"drive.example.org", "www.example.org"}}}}
	if _, err := db.RegisterModules(ctx, []spec.Module{edge, web}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	// settle pushes what is assigned and has both nodes report it applied.
	settle := func() {
		t.Helper()
		if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
			t.Fatal(err)
		}
		for _, node := range []string{"alpha", "beta"} {
			d, err := db.LastDeclaration(ctx, node)
			if err != nil {
				continue
			}
			if err := db.RecordReport(ctx, store.Report{Node: node, Seq: d.Seq, Body: mustJSON(t, spec.Report{Node: node, Seq: d.Seq}), Received: clk.Now()}, true); err != nil {
				t.Fatal(err)
			}
			if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: node, AppliedSeq: d.Seq, HostVersion: "v1", Protocol: spec.Protocol}, clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantClear := func(clear bool, problem string) spec.StatusResult {
		t.Helper()
		res := statusOf(t, c)
		if res.AllClear != clear {
			t.Fatalf("all clear %v, want %v; problems %q", res.AllClear, clear, res.Problems)
		}
		if problem != "" && !strings.Contains(strings.Join(res.Problems, "\n"), problem) {
			t.Fatalf("problems %q do not say %q", res.Problems, problem)
		}
		return res
	}
	report := func(subject string, s spec.EdgeState) {
		t.Helper()
		c.edges.on(ctx, &nats.Msg{Subject: spec.NodeSubject(subject, spec.KindEdgeState), Data: mustJSON(t, s)})
	}

	if err := db.Assign(ctx, "web", "beta", nil, clk.Now()); err != nil {
		t.Fatal(err)
	}
	settle()
	res := wantClear(true, "")
	if ps, ok := publicOf(res, "drive.example.org"); !ok || ps.Node != "beta" || ps.Module != "web" || len(ps.Edges) != 0 {
		t.Fatalf("no edge assigned: %+v in %+v", ps, res.Public)
	}

	if err := db.Assign(ctx, "edge", "alpha", nil, clk.Now()); err != nil {
		t.Fatal(err)
	}
	settle()
	res = wantClear(false, "public name drive.example.org: edge alpha has not reported its certificates")
	if ps, _ := publicOf(res, "www.example.org"); len(ps.Edges) != 1 || ps.Edges[0].Edge != "alpha" || ps.Edges[0].State != "not reported" {
		t.Fatalf("an edge not reported: %+v", ps)
	}

	expires := clk.Now().Add(60 * 24 * time.Hour)
	valid := spec.EdgeState{Node: "alpha", Time: clk.Now(), Edge: "edge", Names: []spec.EdgeName{
		{Name: "drive.example.org", State: spec.EdgeValid, NotAfter: expires},
		{Name: "www.example.org", State: spec.EdgeValid, NotAfter: expires},
	}}
	report("alpha", valid)
	res = wantClear(true, "")
	if ps, _ := publicOf(res, "www.example.org"); len(ps.Edges) != 1 || ps.Edges[0].State != spec.EdgeValid || !ps.Edges[0].NotAfter.Equal(expires) || ps.Edges[0].Problem != "" {
		t.Fatalf("valid: %+v", ps)
	}

	// Lies change nothing.
	many := make([]spec.EdgeName, spec.MaxEdgeNames+1)
	for i := range many {
		many[i] = spec.EdgeName{Name: fmt.Sprintf("n%d.example.org", i), State: spec.EdgeFailed, Error: "x"}
	}
	failing := spec.EdgeState{Node: "alpha", Edge: "edge", Names: []spec.EdgeName{{Name: "www.example.org", State: spec.EdgeFailed, Error: "lie"}}}
	for name, lie := range map[string]struct {
		subject string
		s       spec.EdgeState
	}{
		"too many names":          {"alpha", spec.EdgeState{Node: "alpha", Edge: "edge", Names: many}},
		"another node's":          {"beta", failing},
		"a state no host sends":   {"alpha", spec.EdgeState{Node: "alpha", Edge: "edge", Names: []spec.EdgeName{{Name: "www.example.org", State: "\x1b[2Kfine"}}}},
		"a name listed twice":     {"alpha", spec.EdgeState{Node: "alpha", Edge: "edge", Names: append(failing.Names, failing.Names...)}},
		"from a node not an edge": {"beta", spec.EdgeState{Node: "beta", Edge: "edge", Names: failing.Names}},
	} {
		report(lie.subject, lie.s)
		res := wantClear(true, "")
		if ps, _ := publicOf(res, "www.example.org"); len(ps.Edges) != 1 || ps.Edges[0].State != spec.EdgeValid {
			t.Fatalf("%s: changed www.example.org to %+v", name, ps)
		}
	}
	if _, ok := c.edges.of(map[string]bool{"alpha": true, "beta": true})["beta"]; ok {
		t.Fatal("a report of a node declared no edge was kept")
	}

	// Names not in the roster are not shown; a renewal error far from
	// the expiry is shown and is no problem; a huge one is clipped.
	extra := valid
	extra.Names = append([]spec.EdgeName{{Name: "evil.example.org", State: spec.EdgeFailed, Error: "look at me"}}, valid.Names...)
	extra.Names[1].Error, extra.Names[1].ErrorAt, extra.Names[1].Retry = strings.Repeat("\u202e", 1<<16), clk.Now(), clk.Now().Add(time.Hour)
	report("alpha", extra)
	res = wantClear(true, "")
	if _, ok := publicOf(res, "evil.example.org"); ok || len(res.Public) != 2 {
		t.Fatalf("a name not in the roster shown: %+v", res.Public)
	}
	if ps, _ := publicOf(res, "drive.example.org"); spec.EncodedLen(ps.Edges[0].Error) > spec.MaxStatusText || ps.Edges[0].Error == "" {
		t.Fatalf("a huge error shown as %d bytes", spec.EncodedLen(ps.Edges[0].Error))
	}

	// A failure stops the all-clear, saying the error and the retry.
	failed := valid
	failed.Names = []spec.EdgeName{valid.Names[0], {Name: "www.example.org", State: spec.EdgeFailed,
		Error: "acme: urn:ietf:params:acme:error:dns: no such host", ErrorAt: clk.Now().Add(-time.Minute), Retry: clk.Now().Add(time.Minute)}}
	report("alpha", failed)
	res = wantClear(false, "public name www.example.org: edge alpha has no certificate for it: acme: urn:ietf:params:acme:error:dns: no such host; tried again at 2026-05-01T12:01:00Z (in 1m0s)")
	if ps, _ := publicOf(res, "www.example.org"); ps.Edges[0].State != spec.EdgeFailed || ps.Edges[0].Retry.IsZero() || !strings.Contains(ps.Edges[0].Error, "no such host") {
		t.Fatalf("failed: %+v", ps)
	}

	// A certificate within a week of its expiry whose renewal fails.
	soon := valid
	soon.Names = []spec.EdgeName{valid.Names[0], {Name: "www.example.org", State: spec.EdgeValid, NotAfter: clk.Now().Add(3 * 24 * time.Hour),
		Error: "connection refused", ErrorAt: clk.Now(), Retry: clk.Now().Add(2 * time.Minute)}}
	report("alpha", soon)
	wantClear(false, "public name www.example.org: edge alpha holds a certificate for it that expires in 72h0m0s and was not renewed: connection refused")

	// Its expiry passed: expired, whatever the host said.
	clk.Add(4 * 24 * time.Hour)
	settle()
	res = wantClear(false, "www.example.org: edge alpha holds a certificate for it that expired 24h0m0s ago")
	if ps, _ := publicOf(res, "www.example.org"); ps.Edges[0].State != spec.EdgeExpired {
		t.Fatalf("expired: %+v", ps)
	}

	// The edge unassigned: its report is forgotten.
	if err := db.Unassign(ctx, "edge", "alpha"); err != nil {
		t.Fatal(err)
	}
	settle()
	res = wantClear(true, "")
	if ps, _ := publicOf(res, "www.example.org"); len(ps.Edges) != 0 {
		t.Fatalf("an edge unassigned: %+v", ps)
	}
	if len(c.edges.of(map[string]bool{"alpha": true})) != 0 {
		t.Fatal("the report of an edge unassigned was kept")
	}
}
