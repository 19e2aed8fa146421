package mesh

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The controller's /metrics is a registry of its own, never the default
// one: the counters the controller keeps (metrics), the fleet read from
// the store at each scrape (fleetCollector), the histograms of pushes,
// applies and, when the process runs one, its resolver's answers, and the
// Go runtime's and the process's collectors.

// metricsReadTimeout bounds the store's read at a scrape.
const metricsReadTimeout = 5 * time.Second

// timings are the controller's histograms.
type timings struct {
	// push is the time the push verb takes to compose and send (not the
	// nodes' applies); a dry run is not counted.
	push prometheus.Histogram
	// apply is how long nodes say they took to apply a declaration.
	apply prometheus.Histogram
}

func newTimings() *timings {
	return &timings{
		push: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mesh_push_duration_seconds",
			Help:    "Time the push verb took to compose the mesh and send the declarations, not counting the nodes' applies; dry runs are not counted.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mesh_apply_duration_seconds",
			Help:    "Time a node took to apply a declaration, as its report says (pushes and reconcile passes that corrected drift; refusals and previews are not counted).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
	}
}

// NewResolverLatency is the histogram of the process's resolver's time to
// answer a query (mesh_resolver_query_duration_seconds): the resolver
// observes it (resolver.Config.Latency), and the controller's /metrics
// shows it (Config.ResolverLatency).
func NewResolverLatency() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "mesh_resolver_query_duration_seconds",
		Help:    "Time the resolver of the controller's machine took to answer a query, from its read to its answer's write: the mesh's names, cached and forwarded ones.",
		Buckets: prometheus.ExponentialBuckets(0.00001, 4, 11),
	})
}

// since observes the seconds since start on h.
func since(h prometheus.Observer, start time.Time) {
	h.Observe(time.Since(start).Seconds())
}

// newRegistry is c's registry: every series /metrics shows.
func (c *Controller) newRegistry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	cs := []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mesh_ready", Help: "1 when every part of the process is ready."}, func() float64 {
			if len(c.notReady()) > 0 {
				return 0
			}
			return 1
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "mesh_build_info",
			Help:        "The running binary: its SHA-256 (what a node reports as its version), its target and Go.",
			ConstLabels: prometheus.Labels{"sha256": c.cfg.Version, "goos": runtime.GOOS, "goarch": runtime.GOARCH, "go": runtime.Version()},
		}, func() float64 { return 1 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mesh_audit_queued", Help: "Operator API calls audited in memory only: the store did not take them yet."},
			func() float64 { return float64(c.auditor.auditQueued()) }),
		newFleetCollector(c.deps.DB, c.beats.lastHeard, c.cfg.Now, c.guard),
		c.timings.push,
		c.timings.apply,
	}
	m := &c.metrics
	for _, k := range []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"mesh_heartbeats_total", "Heartbeats received.", &m.heartbeats},
		{"mesh_heartbeats_excess_total", "Heartbeats received beyond what a host sends (100 in 10 s from one node); only each node's latest is written.", &m.heartbeatsExcess},
		{"mesh_reports_total", "Reports received: applies, reconcile passes, dry runs and refusals.", &m.reports},
		{"mesh_reports_unsent_total", "Reports dropped because they name a declaration never sent to their node.", &m.reportsUnsent},
		{"mesh_fallbacks_refused_total", "Launcher fall-backs carried by heartbeats and not shown: a digest not a release's, a time zero or ahead of the controller's clock.", &m.fallbacksRefused},
		{"mesh_api_calls_total", "Operator API calls answered.", &m.apiCalls},
		{"mesh_enrol_requests_total", "Enrolment requests received, whatever their outcome.", &m.enrols},
		{"mesh_api_errors_total", "Operator API calls answered with an error.", &m.apiErrors},
		{"mesh_replies_refused_total", "Requests dropped unanswered and not acted on because their reply subject was not under the requester's own inbox.", &m.repliesRefused},
		{"mesh_certs_issued_total", "Leaves signed for nodes' CSRs.", &m.certsIssued},
		{"mesh_csr_refused_total", "Nodes' CSRs refused: a name the node may not hold, a weak key, a CSR that does not parse or verify, an oversized request.", &m.csrRefused},
		{"mesh_declarations_sent_total", "Declarations published to nodes (previews are not counted).", &m.declarationsSent},
		{"mesh_declaration_bytes_total", "Bytes of the declarations published: their signed bodies.", &m.declarationBytes},
		{"mesh_declarations_redelivered_total", "Declarations handed again, as recorded, to a node heard not to apply them 15 s after they were sent.", &m.redelivered},
		{"mesh_rosters_sent_total", "Roster messages published (once per roster change, to every node).", &m.rostersSent},
		{"mesh_rosters_redelivered_total", "The roster in force announced again to every host, when a host was heard 15 s not to hold it.", &m.rostersRedelivered},
		{"mesh_roster_bytes_total", "Bytes of the roster messages published: their signed bodies.", &m.rosterBytes},
		{"mesh_blobs_collected_total", "Blobs deleted because no module, node's last declaration or release named them.", &m.blobsCollected},
		{"mesh_blob_bytes_collected_total", "Bytes of the blobs collected.", &m.blobBytesCollected},
		{"mesh_panics_total", "Panics recovered in a handler or loop of this process; each is logged with its stack.", c.cfg.Panics},
	} {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{Name: k.name, Help: k.help}, func() float64 { return float64(k.v.Load()) }))
	}
	if c.cfg.ResolverLatency != nil {
		cs = append(cs, c.cfg.ResolverLatency)
	}
	for _, col := range cs {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("register the controller's metrics: %w", err)
		}
	}
	return reg, nil
}

// metricsHandler is /metrics: the registry's series in the format the
// scraper asks for. A panic in a collector is recovered where it ran and
// answered as a 500.
func (c *Controller) metricsHandler() http.Handler {
	return promhttp.HandlerFor(c.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// fleetCollector reads the nodes from the store at each scrape. A store
// that does not answer shows as mesh_store_up 0 and no node series: never
// as a fleet of no node.
type fleetCollector struct {
	db        Store
	lastHeard func(store.Node) store.Node // the node as its heartbeats say, recorded or not
	now       func() time.Time
	guard     guard

	nodes, heard, running, storeUp *prometheus.Desc
}

func newFleetCollector(db Store, heard func(store.Node) store.Node, now func() time.Time, g guard) *fleetCollector {
	return &fleetCollector{
		db: db, lastHeard: heard, now: now, guard: g,
		nodes: prometheus.NewDesc("mesh_nodes", "Nodes in the mesh.", nil, nil),
		heard: prometheus.NewDesc("mesh_nodes_heard", "Nodes heard from in the last minute.", nil, nil),
		running: prometheus.NewDesc("mesh_nodes_running",
			"Nodes by the digest of the binary their last heartbeat said they run (\"other\": not a SHA-256); no order between digests.", []string{"sha256"}, nil),
		storeUp: prometheus.NewDesc("mesh_store_up", "1 when the store answered this scrape.", nil, nil),
	}
}

func (f *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.nodes
	ch <- f.heard
	ch <- f.running
	ch <- f.storeUp
}

// Collect runs on a goroutine of the registry's, which no handler's guard
// covers: a panic is recovered here, and the scrape fails with it.
func (f *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	defer f.guard.catch("metrics: read the nodes", func(err error) { ch <- prometheus.NewInvalidMetric(f.storeUp, err) })
	ctx, cancel := context.WithTimeout(context.Background(), metricsReadTimeout)
	defer cancel()
	nodes, err := f.db.Nodes(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(f.storeUp, prometheus.GaugeValue, 0)
		return
	}
	heard := 0
	for i, n := range nodes {
		n = f.lastHeard(n)
		nodes[i] = n
		if !n.LastHeard.IsZero() && f.now().Sub(n.LastHeard) < time.Minute {
			heard++
		}
	}
	ch <- prometheus.MustNewConstMetric(f.nodes, prometheus.GaugeValue, float64(len(nodes)))
	ch <- prometheus.MustNewConstMetric(f.heard, prometheus.GaugeValue, float64(heard))
	for d, n := range runningDigests(nodes) {
		ch <- prometheus.MustNewConstMetric(f.running, prometheus.GaugeValue, float64(n), d)
	}
	ch <- prometheus.MustNewConstMetric(f.storeUp, prometheus.GaugeValue, 1)
}

// runningDigests counts the nodes heard from by the digest their last
// heartbeat reported: a node reports what it likes, so a version that is
// not a SHA-256 is counted as "other" rather than made a label.
func runningDigests(nodes []store.Node) map[string]int {
	out := map[string]int{}
	for _, n := range nodes {
		switch {
		case n.LastHeard.IsZero() || n.HostVersion == "":
		case spec.CheckReleaseDigest(n.HostVersion) == nil:
			out[n.HostVersion]++
		default:
			out["other"]++
		}
	}
	return out
}
