package mesh

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// page is the controller's answer to GET path on its HTTP listener.
func page(t testing.TB, c *Controller, path string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	c.httpHandler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w.Code, w.Body.String()
}

// TestStatusPageSaysWhatStatusSays: the fleet page's verdict is status's,
// and the nodes page lists every node status lists; on loopback neither
// needs a session, and mesh ui says the page is open.
func TestStatusPageSaysWhatStatusSays(t *testing.T) {
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "10.0.0.2", NKey: "Ubeta", Joined: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	st, err := c.status(ctx, spec.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	code, body := page(t, c, "/")
	if code != http.StatusOK || st.AllClear || !strings.Contains(body, "Not all clear") || !strings.Contains(body, `<a href="/nodes/beta">beta</a> has never been heard`) {
		t.Fatalf("fleet page %d, status all clear %v, problems %q:\n%s", code, st.AllClear, st.Problems, body)
	}
	code, body = page(t, c, "/nodes")
	for _, n := range st.Nodes {
		if !strings.Contains(body, fmt.Sprintf("data-node=%q", n.Node)) {
			t.Errorf("nodes page (%d) without %s:\n%s", code, n.Node, body)
		}
	}
	res, err := c.ui.login(ctx, spec.UILoginRequest{})
	if err != nil || !res.Open {
		t.Fatalf("mesh ui on loopback: %+v %v", res, err)
	}
}

// BenchmarkStatusPage is the fleet and nodes pages of 1,000 nodes heard,
// server side: status, the node list, the overlay, rendered, beside the
// status verb alone. It reports each one's median time (p50-ms).
func BenchmarkStatusPage(b *testing.B) {
	clk := &clock{now: time.Now()}
	c, db := newController(b, clk)
	ctx := context.Background()
	for i := range 999 {
		name := fmt.Sprintf("n%04d", i)
		if err := db.AddNode(ctx, store.Node{Name: name, Address: "10.0.0.1", NKey: "U" + name, Joined: clk.Now()}); err != nil {
			b.Fatal(err)
		}
		if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: name, Protocol: spec.Protocol, HostVersion: "abc", IntervalMS: 10000}, clk.Now()); err != nil {
			b.Fatal(err)
		}
	}
	// The peer: the status verb alone, what mesh status asks for.
	b.Run("statusverb", func(b *testing.B) {
		var took []time.Duration
		for b.Loop() {
			start := time.Now()
			if _, err := c.status(ctx, spec.StatusRequest{}); err != nil {
				b.Fatal(err)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	})
	for _, path := range []string{"/", "/nodes"} {
		b.Run(strings.Trim(path, "/")+"page", func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				if code, body := page(b, c, path); code != http.StatusOK || !strings.Contains(body, "1000 node(s)") && !strings.Contains(body, "n0998") {
					b.Fatalf("%s: %d", path, code)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
