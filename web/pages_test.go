package web

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// serve runs the pages of src, open as on loopback, until the test ends.
func serve(t *testing.T, src Source, g *Gate) (*Pages, *httptest.Server) {
	t.Helper()
	p := newPages(t, src)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	if g == nil {
		var err error
		if g, err = NewGate(true, "", nil); err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ready\n") })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "mesh_ready 1\n") })
	mux.HandleFunc("GET /roots.pem", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "-----BEGIN CERTIFICATE-----\n") })
	p.Register(mux)
	srv := httptest.NewServer(p.Guard(g, mux))
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return p, srv
}

// get is a page's status code and body.
func get(t *testing.T, c *http.Client, url string) (int, string, http.Header) {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestFleetPageSaysWhatStopsTheAllClear: the fleet page gives status's
// verdict, lists its problems, each linked to the node it names, and
// every answer carries a policy that allows no inline script.
func TestFleetPageSaysWhatStopsTheAllClear(t *testing.T) {
	src := newFake(3, time.Now())
	_, srv := serve(t, src, nil)
	code, body, h := get(t, nil, srv.URL+"/")
	if code != 200 || !strings.Contains(body, "All clear") || !strings.Contains(body, "3 node(s) heard") {
		t.Fatalf("fleet page: %d\n%s", code, body)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("Content-Security-Policy %q", csp)
	}
	src.change(func(st *spec.StatusResult, _ *[]spec.Node) {
		st.AllClear = false
		st.Problems = []string{"node0001 has not been heard for 12s (it sends a heartbeat every 1s)", "the names every node serves have changed"}
	})
	_, body, _ = get(t, nil, srv.URL+"/")
	for _, want := range []string{"Not all clear", `<a href="/nodes/node0001">node0001</a> has not been heard for 12s`, "the names every node serves have changed"} {
		if !strings.Contains(body, want) {
			t.Errorf("fleet page without %q:\n%s", want, body)
		}
	}
}

// TestFleetPageLinksEveryNodeAProblemNames: a problem line links each
// node it names wherever the name stands (a roll's next node, an
// orphaned grant's provider and consumer), not a name inside a longer
// word or a dotted name, and what the line holds around the names stays
// text.
func TestFleetPageLinksEveryNodeAProblemNames(t *testing.T) {
	src := newFake(3, time.Now())
	src.change(func(st *spec.StatusResult, _ *[]spec.Node) {
		st.AllClear = false
		st.Problems = []string{
			"roll 4 of 1a2b3c is running: 1 of 3 nodes healthy, node0002 next or being sent (mesh release roll --show)",
			"db-node0001 holds grant pw of node node0000, which provides it no more (orphaned): assign a provider and mesh grant rotate db node0001, or unassign db",
			"roll 5 of 1a2b3c halted at node0001: <b>node0002</b> said <img src=x onerror=alert(1)> to node0000-old and www.node0000.example.",
		}
	})
	_, srv := serve(t, src, nil)
	_, body, _ := get(t, nil, srv.URL+"/")
	link := func(n string) string { return `<a href="/nodes/` + n + `">` + n + `</a>` }
	for _, want := range []string{
		"1 of 3 nodes healthy, " + link("node0002") + " next or being sent",
		"db-node0001 holds grant pw of node " + link("node0000") + ", which provides it no more",
		"mesh grant rotate db " + link("node0001") + ", or unassign db</li>",
		"halted at " + link("node0001") + ": &lt;b&gt;" + link("node0002") + "&lt;/b&gt; said &lt;img src=x onerror=alert(1)&gt; to node0000-old and www.node0000.example.</li>",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("fleet page without %q", want)
		}
	}
	if strings.Contains(body, "<img") || strings.Contains(body, "<b>") {
		t.Errorf("a problem's markup not escaped")
	}
	if t.Failed() {
		t.Log(body)
	}
}

// TestPagesEscapeWhatNodesSend: facts, a report and a version holding
// markup are shown as text on every page that shows them.
func TestPagesEscapeWhatNodesSend(t *testing.T) {
	const hostile = `<img src=x onerror=alert(1)>`
	src := newFake(2, time.Now())
	src.change(func(st *spec.StatusResult, nodes *[]spec.Node) {
		st.Nodes[1].HostVersion = hostile
		st.Nodes[1].Failures = []string{"m:file:/x: " + hostile}
		st.AllClear, st.Problems = false, []string{"node0001 failed 1 resource(s) " + hostile}
		n := &(*nodes)[1]
		n.Facts.Kernel, n.Facts.Hostname = hostile, hostile
		n.LastReport = &spec.Report{Node: n.Name, Seq: 3, Results: []spec.ResourceResult{{Name: hostile, Kind: "file", Outcome: spec.Failed, Error: hostile}}}
	})
	_, srv := serve(t, src, nil)
	for _, path := range []string{"/", "/nodes", "/nodes/node0001"} {
		code, body, _ := get(t, nil, srv.URL+path)
		if code != 200 || strings.Contains(body, "<img") || !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") {
			t.Errorf("%s: %d, the markup not escaped or not shown:\n%s", path, code, body)
		}
	}
	if code, _, _ := get(t, nil, srv.URL+"/nodes/nobody"); code != http.StatusNotFound {
		t.Errorf("a node that is not: %d, want 404", code)
	}
}

// TestPagesListNodesModulesAndActivity: the nodes page lists every node
// with its sequences and architecture, the modules page each module and
// where it is assigned, the activity page the pushes newest first.
func TestPagesListNodesModulesAndActivity(t *testing.T) {
	src := newFake(3, time.Now())
	src.audit = []spec.AuditEntry{{Time: time.Now().Add(-time.Hour), Verb: "push", Args: "{}", Outcome: "ok", Operator: "op"},
		{Time: time.Now().Add(-time.Minute), Verb: "status", Outcome: "ok"}, {Time: time.Now(), Verb: "push", Args: `{"nodes":["node0002"]}`, Outcome: "ok"}}
	_, srv := serve(t, src, nil)
	_, body, _ := get(t, nil, srv.URL+"/nodes")
	for _, want := range []string{`data-node="node0000"`, `data-node="node0002"`, `<span class="applied">3</span>`, "amd64"} {
		if !strings.Contains(body, want) {
			t.Errorf("nodes page without %q:\n%s", want, body)
		}
	}
	if _, body, _ = get(t, nil, srv.URL+"/modules"); !strings.Contains(body, `<a href="/nodes/node0000">node0000</a>`) {
		t.Errorf("modules page:\n%s", body)
	}
	_, body, _ = get(t, nil, srv.URL+"/activity")
	newest, oldest := strings.Index(body, "node0002"), strings.Index(body, "<td><code>{}</code></td>")
	if strings.Contains(body, "<td>status</td>") || newest < 0 || oldest < 0 || newest > oldest {
		t.Errorf("activity page: pushes not listed newest first, or another call listed:\n%s", body)
	}
}

// TestStatusFieldsWithoutAPlaceAreTables: a field of status no page has a
// place of its own for is a table of its rows.
func TestStatusFieldsWithoutAPlaceAreTables(t *testing.T) {
	s := tableOf("public names", []byte(`[{"name":"www.example.com","edge":"alpha","cert":"valid until 2030"},{"name":"<b>x</b>","edge":"beta"}]`))
	if strings.Join(s.Columns, ",") != "cert,edge,name" || len(s.Rows) != 2 || s.Rows[0][2] != "www.example.com" || s.Rows[1][0] != "" {
		t.Fatalf("table %+v", s)
	}
	if extra := extraSections(spec.StatusResult{}); len(extra) != 0 {
		t.Fatalf("status's own fields shown as extra tables: %+v", extra)
	}
}

// stream reads one page's event stream, event by event.
type stream struct {
	events chan [2]string // name, data
}

func openStream(t *testing.T, c *http.Client, url string) *stream {
	t.Helper()
	if c == nil {
		c = http.DefaultClient
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &stream{events: make(chan [2]string, 100)}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var name, data string
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "":
				if name != "" {
					s.events <- [2]string{name, data}
				}
				name, data = "", ""
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			}
		}
		close(s.events)
	}()
	return s
}

// next is the next event named name within d.
func (s *stream) next(t *testing.T, name string, d time.Duration) string {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case e, ok := <-s.events:
			if !ok {
				t.Fatalf("the stream ended before a %q event", name)
			}
			if e[0] == name {
				return e[1]
			}
		case <-deadline:
			t.Fatalf("no %q event within %s", name, d)
		}
	}
}

// TestStreamSaysChangesWithinASecond: a page's stream says "change" within
// a second of a change reaching the source, says nothing for a heartbeat
// that changes only when a node was heard (it says "heard"), and says
// "change" when a node turns silent though nothing reached the source.
func TestStreamSaysChangesWithinASecond(t *testing.T) {
	now := time.Now()
	src := newFake(3, now)
	_, srv := serve(t, src, nil)
	st, _ := src.Status(context.Background())
	s := openStream(t, nil, srv.URL+"/events?digest="+digestOf(st, src.Recorded()))
	if heard := s.next(t, "heard", 2*time.Second); !strings.Contains(heard, `"node0002":`) {
		t.Fatalf("first heard event %s", heard)
	}
	src.change(func(st *spec.StatusResult, _ *[]spec.Node) {
		st.Time = time.Now()
		for i := range st.Nodes {
			at := st.Time
			st.Nodes[i].LastHeard, st.Nodes[i].Heard = &at, "0s ago"
		}
	})
	s.next(t, "heard", time.Second)
	start := time.Now()
	src.change(func(st *spec.StatusResult, _ *[]spec.Node) { st.Nodes[0].AppliedSeq, st.Nodes[0].SentSeq = 4, 4 })
	s.next(t, "change", time.Second)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("change took %s", took)
	}
}

// TestStreamSaysNewFacts: facts recorded that status does not say (a
// node's kernel) make the stream say "change", as its page shows them.
func TestStreamSaysNewFacts(t *testing.T) {
	src := newFake(1, time.Now())
	_, srv := serve(t, src, nil)
	_, body, _ := get(t, nil, srv.URL+"/nodes/node0000")
	digest := regexp.MustCompile(`data-digest="([0-9a-f]+)"`).FindStringSubmatch(body)
	if digest == nil {
		t.Fatalf("the node page gives no digest:\n%s", body)
	}
	s := openStream(t, nil, srv.URL+"/events?digest="+digest[1])
	s.next(t, "heard", 2*time.Second)
	src.record(func(_ *spec.StatusResult, nodes *[]spec.Node) { (*nodes)[0].Facts.Kernel = "6.12.0-1-arm64" })
	s.next(t, "change", time.Second)
}

// TestStreamSeesSilenceComing: with nothing reaching the source, the hub
// reads status again when a node's silence is due.
func TestStreamSeesSilenceComing(t *testing.T) {
	src := newFake(1, time.Now())
	// The fake's status says the node is silent once its deadline passes:
	// what the real one does.
	heard := *src.status.Nodes[0].LastHeard
	_, srv := serve(t, &silencing{fakeSource: src, heard: heard}, nil)
	s := openStream(t, nil, srv.URL+"/events")
	s.next(t, "change", 2*time.Second) // the page's digest was not given
	start := time.Now()
	s.next(t, "change", 5*time.Second)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("silence seen after %s", took)
	}
}

// silencing is a fake whose node turns silent 3 s after it was heard.
type silencing struct {
	*fakeSource
	heard time.Time
}

func (s *silencing) Status(ctx context.Context) (spec.StatusResult, error) {
	st, err := s.fakeSource.Status(ctx)
	st.Time = time.Now()
	st.Nodes = append([]spec.NodeStatus(nil), st.Nodes...)
	st.Nodes[0].Silent = st.Time.Sub(s.heard) > s.SilentAfter(time.Second)
	return st, err
}

// BenchmarkNodesPageRender is the nodes page of 1,000 nodes rendered from
// a status already read: the templates' share of a page's time.
func BenchmarkNodesPageRender(b *testing.B) {
	p := newPages(b, newFake(1000, time.Now()))
	r := httptest.NewRequest("GET", "/nodes", nil)
	handler := p.page("nodes", p.nodes)
	for b.Loop() {
		w := httptest.NewRecorder()
		handler(w, r)
		if w.Code != 200 {
			b.Fatal(w.Code)
		}
	}
}
