package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// scrape is the controller's /metrics, read as Prometheus reads it.
func scrape(t *testing.T, c *Controller) string {
	t.Helper()
	resp, err := http.Get("http://" + c.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", resp.StatusCode, body)
	}
	return string(body)
}

// heardAt has alpha send a heartbeat that says it runs version, and
// waits until it is recorded.
func heardAt(t *testing.T, c *Controller, db *store.DB, clk *clock, version string) {
	t.Helper()
	hb := spec.Heartbeat{Node: "alpha", Time: clk.Now(), Protocol: spec.Protocol, HostVersion: version}
	if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindHeartbeat), mustJSON(t, hb)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "alpha's heartbeat recorded", func() error {
		n, err := db.Node(context.Background(), "alpha")
		if err == nil && n.HostVersion == version {
			return nil
		}
		return fmt.Errorf("version %q, %v", n.HostVersion, err)
	})
}

// TestMetricsLint: every series the registry gathers passes the client
// library's lint (help, units, counter suffixes, names).
func TestMetricsLint(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newControllerCfg(t, clk, nil, func(cfg *Config) { cfg.ResolverLatency = NewResolverLatency() })
	heardAt(t, c, db, clk, strings.Repeat("ab", 32))
	problems, err := testutil.GatherAndLint(c.registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestMetricsKeepTheirNames: /metrics still shows every series it showed
// when it was written by hand, under the same names, with the new
// histograms and the Go runtime's and the process's series.
func TestMetricsKeepTheirNames(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	digest := strings.Repeat("cd", 32)
	heardAt(t, c, db, clk, digest)
	body := scrape(t, c)
	for _, series := range []string{
		"mesh_ready 1",
		`mesh_build_info{`,
		"mesh_nodes 1", "mesh_nodes_heard 1", `mesh_nodes_running{sha256="` + digest + `"} 1`, "mesh_store_up 1",
		"mesh_heartbeats_total 1", "mesh_heartbeats_excess_total 0", "mesh_reports_total 0", "mesh_reports_unsent_total 0",
		"mesh_fallbacks_refused_total 0", "mesh_api_calls_total 0", "mesh_enrol_requests_total 0", "mesh_api_errors_total 0",
		"mesh_replies_refused_total 0", "mesh_certs_issued_total 0", "mesh_csr_refused_total 0",
		"mesh_declarations_sent_total ", "mesh_declaration_bytes_total ", "mesh_declarations_redelivered_total 0", "mesh_rosters_redelivered_total 0", "mesh_rosters_sent_total ", "mesh_roster_bytes_total ",
		"mesh_blobs_collected_total 0", "mesh_blob_bytes_collected_total 0", "mesh_audit_queued 0", "mesh_panics_total 0",
		"go_goroutines ", "process_resident_memory_bytes ",
		"mesh_push_duration_seconds_count 0", "mesh_apply_duration_seconds_count 0",
		"go_memstats_heap_alloc_bytes ", "process_cpu_seconds_total ",
	} {
		if !strings.Contains(body, "\n"+series) {
			t.Errorf("/metrics lacks %q", series)
		}
	}
	for _, label := range []string{`sha256=""`, `goos="`, `goarch="`, `go="go`} {
		if !regexp.MustCompile(`\nmesh_build_info\{[^}]*` + regexp.QuoteMeta(label)).MatchString(body) {
			t.Errorf("mesh_build_info lacks %s", label)
		}
	}
	if strings.Contains(body, "mesh_resolver_query_duration_seconds") {
		t.Errorf("a controller given no resolver's histogram shows one")
	}
}

// nodesDown is the real store but for Nodes, which fails once on is set.
type nodesDown struct {
	*store.DB
	on *atomic.Bool
}

func (s nodesDown) Nodes(ctx context.Context) ([]store.Node, error) {
	if s.on.Load() {
		return nil, errors.New("injected: the store does not answer")
	}
	return s.DB.Nodes(ctx)
}

// TestMetricsOfAStoreThatDoesNotAnswer: a scrape whose read of the nodes
// fails says so (mesh_store_up 0) and shows no node series, never a
// fleet of no node; the rest of /metrics is served.
func TestMetricsOfAStoreThatDoesNotAnswer(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	on := &atomic.Bool{}
	c, _ := newControllerWith(t, clk, func(db *store.DB) Store { return nodesDown{DB: db, on: on} })
	on.Store(true)
	body := scrape(t, c)
	if !strings.Contains(body, "\nmesh_store_up 0\n") {
		t.Errorf("/metrics lacks mesh_store_up 0:\n%s", body)
	}
	for _, name := range []string{"mesh_nodes", "mesh_nodes_heard", "mesh_nodes_running"} {
		if regexp.MustCompile(`\n` + name + `[ {]`).MatchString(body) {
			t.Errorf("/metrics shows %s of a store that did not answer", name)
		}
	}
	if !strings.Contains(body, "\nmesh_heartbeats_total 0\n") {
		t.Errorf("/metrics lacks the counters when the store does not answer:\n%s", body)
	}
}

// TestPushAndApplyAreTimed: a push is observed once in
// mesh_push_duration_seconds (a dry run is not), and a report's apply
// time once in mesh_apply_duration_seconds, in seconds.
func TestPushAndApplyAreTimed(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, _ := newController(t, clk)
	ctx := context.Background()
	if _, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if n := metric(t, c, "mesh_push_duration_seconds_count"); n != 0 {
		t.Fatalf("after a dry run: %d pushes timed, want 0", n)
	}
	res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	if n := metric(t, c, "mesh_push_duration_seconds_count"); n != 1 {
		t.Fatalf("after a push: %d pushes timed, want 1", n)
	}
	r := spec.Report{Node: "alpha", Seq: res.Nodes[0].Seq, Time: clk.Now(), ApplyMicros: 1_500_000, Results: []spec.ResourceResult{}}
	if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindReport), mustJSON(t, r)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the apply timed", func() error {
		n := metric(t, c, "mesh_apply_duration_seconds_count")
		if n == 1 {
			return nil
		}
		return fmt.Errorf("%d applies timed", n)
	})
	if body := scrape(t, c); !strings.Contains(body, "\nmesh_apply_duration_seconds_sum 1.5\n") {
		t.Errorf("an apply of 1.5 s is not summed as 1.5 s:\n%s", body)
	}
}

// TestResolverLatencyIsShown: the histogram a controller is given for its
// process's resolver is on its /metrics.
func TestResolverLatencyIsShown(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	lat := NewResolverLatency()
	c, _ := newControllerCfg(t, clk, nil, func(cfg *Config) { cfg.ResolverLatency = lat })
	lat.Observe(0.002)
	if n := metric(t, c, "mesh_resolver_query_duration_seconds_count"); n != 1 {
		t.Errorf("mesh_resolver_query_duration_seconds_count = %d, want the one query observed", n)
	}
}
