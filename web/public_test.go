package web

import (
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// withPublic is a fleet of three nodes whose public name www.example.com
// node0001 serves as web, node0000 holding a valid certificate for it and
// node0002 failing to obtain one with an ACME error holding markup; and a
// name no edge serves.
func withPublic(now time.Time) *fakeSource {
	src := newFake(3, now)
	src.change(func(st *spec.StatusResult, _ *[]spec.Node) {
		st.AllClear = false
		st.Problems = []string{"public name www.example.com: edge node0002 has no certificate for it: acme: <b>rate</b> limited; tried again soon"}
		st.Public = []spec.PublicStatus{
			{Name: "www.example.com", Node: "node0001", Module: "web", Edges: []spec.PublicEdge{
				{Edge: "node0000", State: spec.EdgeValid, NotAfter: now.Add(60 * 24 * time.Hour), Reported: now.Add(-time.Minute)},
				{Edge: "node0002", State: spec.EdgeFailed, Error: "acme: <b>rate</b> limited", ErrorAt: now.Add(-2 * time.Minute),
					Retry: now.Add(10 * time.Minute), Reported: now.Add(-time.Minute), Problem: "has no certificate for it: acme: <b>rate</b> limited"},
			}},
			{Name: "blog.example.com", Node: "node0002", Module: "blog", Edges: []spec.PublicEdge{}},
		}
		st.PublicOmitted = 4
	})
	return src
}

// TestPublicNamesPageShowsEachEdgesCertificate: the public names page
// lists each name with the node and module serving it and, per edge
// (linked to its node), the certificate's state, expiry, last ACME error
// (as text) and when it is tried again; a name no edge serves says so.
// The fleet page counts them and links a problem's edge to its node, and
// no longer shows them as a table of raw fields.
func TestPublicNamesPageShowsEachEdgesCertificate(t *testing.T) {
	now := time.Now()
	src := withPublic(now)
	_, srv := serve(t, src, nil)
	code, body, _ := get(t, nil, srv.URL+"/public")
	if code != 200 {
		t.Fatalf("/public: %d\n%s", code, body)
	}
	for _, want := range []string{
		`data-public="www.example.com"`, `<a href="/nodes/node0001">node0001</a> / web`,
		`<a href="/nodes/node0000">node0000</a>`, `<a href="/nodes/node0002">node0002</a>`,
		"valid", when(now.Add(60 * 24 * time.Hour)), "failed",
		"acme: &lt;b&gt;rate&lt;/b&gt; limited", "at " + when(now.Add(-2*time.Minute)),
		when(now.Add(10*time.Minute)) + " (in 10m0s)", "reported " + when(now.Add(-time.Minute)),
		`data-public="blog.example.com"`, "no edge serves it", "4 more not listed", "1 with a problem",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("public names page without %q", want)
		}
	}
	if strings.Contains(body, "<b>") {
		t.Errorf("an ACME error's markup not escaped:\n%s", body)
	}
	if t.Failed() {
		t.Log(body)
	}

	_, body, _ = get(t, nil, srv.URL+"/")
	for _, want := range []string{`public name www.example.com: edge <a href="/nodes/node0002">node0002</a> has no certificate`,
		`6 public name(s), 1 with a problem on an edge`, `<a href="/public">`} {
		if !strings.Contains(body, want) {
			t.Errorf("fleet page without %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, `class="extra"`) || strings.Contains(body, "<b>") {
		t.Errorf("fleet page shows public names as raw fields, or their markup:\n%s", body)
	}
	st, _ := src.Status(t.Context())
	if extra := extraSections(st); len(extra) != 0 {
		t.Errorf("public names still shown as extra tables: %+v", extra)
	}
}

// TestNodePageShowsItsPublicNames: the page of the node serving a public
// name shows the name on every edge; an edge's page its own certificate
// only.
func TestNodePageShowsItsPublicNames(t *testing.T) {
	src := withPublic(time.Now())
	_, srv := serve(t, src, nil)
	_, body, _ := get(t, nil, srv.URL+"/nodes/node0001")
	if !strings.Contains(body, `data-public="www.example.com"`) || !strings.Contains(body, `<a href="/nodes/node0002">node0002</a>`) ||
		!strings.Contains(body, `<a href="/nodes/node0000">node0000</a>`) || strings.Contains(body, "blog.example.com") {
		t.Errorf("the serving node's page:\n%s", body)
	}
	_, body, _ = get(t, nil, srv.URL+"/nodes/node0000")
	if !strings.Contains(body, `data-public="www.example.com"`) || strings.Contains(body, `<a href="/nodes/node0002">`) || strings.Contains(body, "rate") {
		t.Errorf("an edge's page shows another edge's certificate:\n%s", body)
	}
	_, body, _ = get(t, nil, srv.URL+"/nodes/node0002")
	if !strings.Contains(body, `data-public="blog.example.com"`) || !strings.Contains(body, "acme: &lt;b&gt;rate&lt;/b&gt; limited") {
		t.Errorf("the failing edge's page:\n%s", body)
	}
}

// when is a time as the pages write it.
func when(t time.Time) string { return funcs["when"].(func(time.Time) string)(t) }
