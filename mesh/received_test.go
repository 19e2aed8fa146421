package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// heavyReport is a report of n failed results whose texts are m bytes of a
// character JSON escapes six-fold.
func heavyReport(node string, seq uint64, n, m int) spec.Report {
	r := spec.Report{Node: node, Seq: seq, Time: time.Now(), Results: []spec.ResourceResult{}}
	for i := range n {
		r.Results = append(r.Results, spec.ResourceResult{Name: fmt.Sprintf("m:file:/f%d", i), Kind: spec.KindFile, Outcome: spec.Failed,
			Error: strings.Repeat("<", m), Note: strings.Repeat("&", m)})
	}
	return r
}

// TestKeptReport: a report is kept within its caps, texts cut and marked,
// failures kept before other results, the rest counted; a report within
// its caps is kept as sent.
func TestKeptReport(t *testing.T) {
	t.Parallel()
	small := spec.Report{Node: "a", Seq: 2, Refused: "sequence 2 is below <3>", Results: []spec.ResourceResult{{Name: "m:file:/x", Kind: "file", Outcome: spec.Failed, Error: "open /x: <denied>"}}}
	many := spec.Report{Node: "a", Seq: 1}
	for i := range spec.MaxReportResults + 500 {
		many.Results = append(many.Results, spec.ResourceResult{Name: fmt.Sprint(i), Outcome: spec.Unchanged})
	}
	many.Results = append(many.Results, spec.ResourceResult{Name: "last", Outcome: spec.Failed, Error: "the one that matters"})
	heavy := heavyReport("a", 1, 2000, 1000)
	heavy.Refused = strings.Repeat(">", 100000)
	for _, tc := range []struct {
		name        string
		r           spec.Report
		kept        int
		cut, failed bool // texts cut; the last result (a failure) kept
	}{
		{"small", small, 1, false, true},
		{"many results", many, spec.MaxReportResults, false, true},
		{"escape-heavy texts", heavy, -1, true, false},
	} {
		got := keptReport(tc.r)
		body, _ := json.Marshal(got)
		if len(body) > spec.MaxReportKept {
			t.Errorf("%s: kept %d bytes, over %d", tc.name, len(body), spec.MaxReportKept)
		}
		if tc.kept >= 0 && len(got.Results) != tc.kept {
			t.Errorf("%s: kept %d results, want %d", tc.name, len(got.Results), tc.kept)
		}
		if len(got.Results)+got.Omitted != len(tc.r.Results) {
			t.Errorf("%s: %d kept + %d omitted, sent %d", tc.name, len(got.Results), got.Omitted, len(tc.r.Results))
		}
		texts := []string{got.Refused}
		for _, r := range got.Results {
			texts = append(texts, r.Name, r.Error, r.Note)
		}
		cut := false
		for _, s := range texts {
			if spec.EncodedLen(s) > spec.MaxReportText {
				t.Errorf("%s: a text of %d encoded bytes kept", tc.name, spec.EncodedLen(s))
			}
			cut = cut || strings.HasSuffix(s, " bytes cut]")
		}
		if cut != tc.cut {
			t.Errorf("%s: texts cut %v, want %v", tc.name, cut, tc.cut)
		}
		if last := tc.r.Results[len(tc.r.Results)-1]; tc.failed && (len(got.Results) == 0 || got.Results[len(got.Results)-1].Name != spec.Clip(last.Name, spec.MaxReportText)) {
			t.Errorf("%s: the last failure was not kept", tc.name)
		}
		t.Logf("%s: sent %d results, kept %d (%d bytes), omitted %d", tc.name, len(tc.r.Results), len(got.Results), len(body), got.Omitted)
	}
	if got := keptReport(small); got.Refused != small.Refused || got.Results[0] != small.Results[0] || got.Omitted != 0 {
		t.Errorf("a small report was changed: %+v", got)
	}
	// Keeping what was kept changes nothing, the count of omitted included.
	once := keptReport(heavy)
	if twice := keptReport(once); twice.Omitted != once.Omitted || len(twice.Results) != len(once.Results) || twice.Refused != once.Refused {
		t.Errorf("kept twice: %d results, %d omitted; once: %d, %d", len(twice.Results), twice.Omitted, len(once.Results), once.Omitted)
	}
}

// TestRepliesFitWhateverNodesSent: with every node's stored report and
// facts as large as a node can send (and larger, as a store written before
// the caps may hold), node list pages, node show and status each answer
// within spec.MaxReply, and node list's pages hold every node once.
func TestRepliesFitWhateverNodesSent(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	const nodes = 16
	big := strings.Repeat("<", 20000)
	for i := range nodes {
		name := fmt.Sprintf("n%02d", i)
		if err := db.AddNode(ctx, store.Node{Name: name, Address: "127.0.0.9", NKey: "U" + name, Joined: clk.Now()}); err != nil {
			t.Fatal(err)
		}
		body := mustJSON(t, heavyReport(name, 1, 100, 1000))
		if err := db.RecordReport(ctx, store.Report{Node: name, Seq: 1, Body: body, Received: clk.Now()}, true); err != nil {
			t.Fatal(err)
		}
		errs := make([]string, 100)
		for j := range errs {
			errs[j] = big[:1000]
		}
		if err := db.RecordFacts(ctx, spec.Facts{Node: name, Hostname: big, Kernel: big, Errors: errs}, clk.Now()); err != nil {
			t.Fatal(err)
		}
		if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: name, HostVersion: big, AppliedSeq: 1, Protocol: spec.Protocol}, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	op := operatorConn(t, c)
	call := func(verb string, req any, res any) int {
		t.Helper()
		m, err := op.Request(spec.APIPrefix+verb, mustJSON(t, req), 20*time.Second)
		if err != nil {
			t.Fatalf("%s: no answer: %v", verb, err)
		}
		if len(m.Data) > spec.MaxReply {
			t.Fatalf("%s: a reply of %d bytes, over %d", verb, len(m.Data), spec.MaxReply)
		}
		var r spec.Reply
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Error != "" {
			t.Fatalf("%s: %s %v", verb, r.Error, err)
		}
		if err := json.Unmarshal(r.Result, res); err != nil {
			t.Fatal(err)
		}
		return len(m.Data)
	}
	var listed []string
	pages := 0
	for req := (spec.NodeListRequest{}); ; pages++ {
		var res spec.NodeListResult
		size := call(spec.NodeList.Name, req, &res)
		t.Logf("node list page %d: %d nodes, %d bytes", pages, len(res.Nodes), size)
		for _, n := range res.Nodes {
			if n.Name == "alpha" {
				continue // the controller's own, which sent nothing
			}
			listed = append(listed, n.Name)
			if n.LastReport == nil || n.LastReport.Omitted == 0 || n.Facts == nil || len(n.Facts.Errors) != spec.MaxFactList+1 {
				t.Fatalf("node %s listed without its report and facts, capped", n.Name)
			}
		}
		if res.Next == "" {
			break
		}
		req.After = res.Next
	}
	if len(listed) != nodes || pages == 0 {
		t.Fatalf("node list: %d nodes over %d pages: %v", len(listed), pages+1, listed)
	}
	for i, n := range listed {
		if want := fmt.Sprintf("n%02d", i); n != want {
			t.Fatalf("node list: %v, want each node once, by name", listed)
		}
	}
	var show spec.NodeShowResult
	call(spec.NodeShow.Name, spec.NodeShowRequest{Name: "n03"}, &show)
	if !strings.HasSuffix(show.Node.Facts.Hostname, " bytes cut]") || !strings.HasSuffix(show.Node.LastReport.Results[0].Error, " bytes cut]") {
		t.Fatalf("node show: texts not cut: hostname %d bytes", len(show.Node.Facts.Hostname))
	}
	// Audit entries as large as a request can be: cut, and as many as fit.
	for range 40 {
		if err := db.Audit(ctx, store.AuditEntry{At: clk.Now(), Operator: "operator", Verb: spec.Assign.Name, Args: big + big, Outcome: big}); err != nil {
			t.Fatal(err)
		}
	}
	var audit spec.AuditResult
	call(spec.Audit.Name, spec.AuditRequest{Since: clk.Now().Add(-time.Hour), Limit: 10000}, &audit)
	assigns := 0
	for _, e := range audit.Entries {
		if e.Verb == spec.Assign.Name {
			assigns++
			if !strings.HasSuffix(e.Args, " bytes cut]") || !strings.HasSuffix(e.Outcome, " bytes cut]") {
				t.Fatalf("audit: an entry's texts not cut: args %d bytes, outcome %d", len(e.Args), len(e.Outcome))
			}
		}
	}
	if assigns != 40 || audit.More {
		t.Fatalf("audit: %d of the 40 entries, more %v", assigns, audit.More)
	}
	var st spec.StatusResult
	size := call(spec.Status.Name, spec.StatusRequest{}, &st)
	t.Logf("status: %d bytes for %d nodes", size, len(st.Nodes))
	for _, n := range st.Nodes {
		if n.Node == "alpha" {
			continue
		}
		if len(n.Failures) != spec.MaxStatusFailures+1 || !strings.Contains(n.Failures[spec.MaxStatusFailures], "more: mesh node show "+n.Node) {
			t.Fatalf("status of %s: %d failures listed: %q", n.Node, len(n.Failures), n.Failures)
		}
	}
}

// TestOversizedReplyIsAnError: an answer past spec.MaxReply, which the bus
// would not carry, is replaced by an error that says so and fits.
func TestOversizedReplyIsAnError(t *testing.T) {
	t.Parallel()
	c, _ := newController(t, &clock{now: time.Now()})
	small := mustJSON(t, spec.Reply{Result: json.RawMessage(`{}`)})
	if got := c.bounded(spec.Status.Name, small); string(got) != string(small) {
		t.Fatalf("a reply that fits was changed: %s", got)
	}
	big := mustJSON(t, spec.Reply{Result: mustJSON(t, strings.Repeat("x", spec.MaxReply))})
	var r spec.Reply
	if err := json.Unmarshal(c.bounded(spec.Status.Name, big), &r); err != nil || r.Result != nil ||
		!strings.Contains(r.Error, fmt.Sprintf("status: the answer is %d bytes, more than the %d a reply may carry", len(big), spec.MaxReply)) {
		t.Fatalf("an oversized reply became %+v (%v)", r, err)
	}
}
