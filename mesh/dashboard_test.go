package mesh

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// dashboardFile is the Grafana dashboard the docs ship.
const dashboardFile = "../docs/grafana/mesh.json"

// dashboardQueries are the PromQL queries of a Grafana dashboard: every
// panel target's expr and every template variable's query, at any depth.
func dashboardQueries(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			switch s, ok := x.(string); {
			case ok && k == "expr":
				out = append(out, s)
			case ok && k == "query":
				out = append(out, s)
			default:
				out = append(out, dashboardQueries(x)...)
			}
		}
	case []any:
		for _, x := range v {
			out = append(out, dashboardQueries(x)...)
		}
	}
	return out
}

var (
	promStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVars     = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	labelValues  = regexp.MustCompile(`\blabel_values\(\s*([^,)]*?)\s*(?:,[^)]*)?\)`)
	promNames    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promNumbers  = regexp.MustCompile(`\b\d+(?:\.\d+)?(?:e[+-]?\d+|ms|[smhdwy])?\b`)
	promKeywords = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "Inf", "NaN", "inf", "nan"}
)

// promMetricNames are the series q names: identifiers with their label
// matchers and ranges, or bare, but not functions (followed by "("),
// keywords, label names of a grouping, strings, numbers, durations or Grafana's
// variables. Grafana's label_values(metric, label) names its metric.
func promMetricNames(q string) []string {
	q = promVars.ReplaceAllString(q, "")
	q = promStrings.ReplaceAllString(q, `""`)
	q = labelValues.ReplaceAllString(q, " $1 ")
	q = promMatchers.ReplaceAllString(q, " ")
	q = promRanges.ReplaceAllString(q, " ")
	q = promGrouping.ReplaceAllString(q, " ")
	q = promNumbers.ReplaceAllString(q, " ")
	var names []string
	for _, loc := range promNames.FindAllStringIndex(q, -1) {
		name := q[loc[0]:loc[1]]
		if strings.HasPrefix(strings.TrimLeft(q[loc[1]:], " \t\n"), "(") || slices.Contains(promKeywords, name) {
			continue
		}
		names = append(names, name)
	}
	return names
}

// TestPromMetricNames: the names the dashboard test reads out of a query.
func TestPromMetricNames(t *testing.T) {
	t.Parallel()
	for q, want := range map[string][]string{
		`histogram_quantile(0.95, sum by (le) (rate(a_bucket{job=~"$job"}[$__rate_interval])))`: {"a_bucket"},
		`sum(b{x="y{z}"}) - sum(c) / on (instance) group_left d`:                                {"b", "c", "d"},
		`label_values(mesh_build_info{job=~"$job"}, instance)`:                                  {"mesh_build_info"},
		`e > bool 1e3 and f offset 5m`:                                                          {"e", "f"},
	} {
		if got := promMetricNames(q); !slices.Equal(got, want) {
			t.Errorf("names of %s: %q, want %q", q, got, want)
		}
	}
}

// TestGrafanaDashboardNamesExportedSeries: every query of
// docs/grafana/mesh.json names only series a running controller's
// registry exports (a histogram's by its _bucket, _sum and _count), the
// resolver's included as the daemon gives it, and the dashboard shows
// the fleet's health, pushes, the resolver and memory.
func TestGrafanaDashboardNamesExportedSeries(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	queries := dashboardQueries(dash)
	if len(queries) < 10 {
		t.Fatalf("%s holds %d queries: %q", dashboardFile, len(queries), queries)
	}

	clk := &clock{now: time.Now()}
	c, db := newControllerCfg(t, clk, nil, func(cfg *Config) { cfg.ResolverLatency = NewResolverLatency() })
	heardAt(t, c, db, clk, strings.Repeat("ef", 32))
	families, err := c.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				exported[f.GetName()+suffix] = true
			}
		}
	}
	used := map[string]bool{}
	for _, q := range queries {
		names := promMetricNames(q)
		if len(names) == 0 {
			t.Errorf("query %q names no series", q)
		}
		for _, name := range names {
			used[name] = true
			if !exported[name] {
				t.Errorf("query %q names %s, which mesh does not export", q, name)
			}
		}
	}
	for _, want := range []string{"mesh_nodes_heard", "mesh_nodes_running", "mesh_push_duration_seconds_bucket", "mesh_apply_duration_seconds_bucket",
		"mesh_resolver_query_duration_seconds_count", "mesh_resolver_query_duration_seconds_bucket", "process_resident_memory_bytes"} {
		if !used[want] {
			t.Errorf("%s has no query of %s", dashboardFile, want)
		}
	}
}
