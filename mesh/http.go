package mesh

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

func (c *Controller) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", c.healthz)
	mux.HandleFunc("GET /metrics", c.serveMetrics)
	mux.HandleFunc("GET /roots.pem", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-pem-file")
		w.Write(c.deps.CA.RootsPEM())
	})
	c.pages.Register(mux)
	return c.pages.Guard(c.ui.gate, mux)
}

// notReady names the parts that are not ready, the controller included.
func (c *Controller) notReady() []string {
	var names []string
	parts := append([]Part{{Name: "controller", Ready: c.ready}}, c.cfg.Parts...)
	for _, p := range parts {
		select {
		case <-p.Ready:
		default:
			names = append(names, p.Name)
		}
	}
	return names
}

func (c *Controller) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if waiting := c.notReady(); len(waiting) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s\n", strings.Join(waiting, ", "))
		return
	}
	fmt.Fprintln(w, "ready")
}

func (c *Controller) serveMetrics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var b strings.Builder
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name, strconv.FormatFloat(v, 'g', -1, 64))
	}
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	ready := 1.0
	if len(c.notReady()) > 0 {
		ready = 0
	}
	gauge("mesh_ready", "1 when every part of the process is ready.", ready)
	fmt.Fprintf(&b, "# HELP mesh_build_info The running binary: its SHA-256 (what a node reports as its version), its target and Go.\n# TYPE mesh_build_info gauge\nmesh_build_info{sha256=%q,goos=%q,goarch=%q,go=%q} 1\n",
		c.cfg.Version, runtime.GOOS, runtime.GOARCH, runtime.Version())
	if nodes, err := c.deps.DB.Nodes(ctx); err == nil {
		heard := 0
		for _, n := range nodes {
			if !n.LastHeard.IsZero() && c.cfg.Now().Sub(n.LastHeard) < time.Minute {
				heard++
			}
		}
		gauge("mesh_nodes", "Nodes in the mesh.", float64(len(nodes)))
		gauge("mesh_nodes_heard", "Nodes heard from in the last minute.", float64(heard))
		running := runningDigests(nodes)
		if len(running) > 0 {
			fmt.Fprintf(&b, "# HELP mesh_nodes_running Nodes by the digest of the binary their last heartbeat said they run (\"other\": not a SHA-256); no order between digests.\n# TYPE mesh_nodes_running gauge\n")
			for _, d := range slices.Sorted(maps.Keys(running)) {
				fmt.Fprintf(&b, "mesh_nodes_running{sha256=%q} %d\n", d, running[d])
			}
		}
		gauge("mesh_store_up", "1 when the store answered this scrape.", 1)
	} else {
		gauge("mesh_store_up", "1 when the store answered this scrape.", 0)
	}
	counter("mesh_heartbeats_total", "Heartbeats received.", c.metrics.heartbeats.Load())
	counter("mesh_heartbeats_excess_total", "Heartbeats received beyond what a host sends (100 in 10 s from one node); only each node's latest is written.", c.metrics.heartbeatsExcess.Load())
	counter("mesh_reports_total", "Reports received: applies, reconcile passes, dry runs and refusals.", c.metrics.reports.Load())
	counter("mesh_reports_unsent_total", "Reports dropped because they name a declaration never sent to their node.", c.metrics.reportsUnsent.Load())
	counter("mesh_fallbacks_refused_total", "Launcher fall-backs carried by heartbeats and not shown: a digest not a release's, a time zero or ahead of the controller's clock.", c.metrics.fallbacksRefused.Load())
	counter("mesh_api_calls_total", "Operator API calls answered.", c.metrics.apiCalls.Load())
	counter("mesh_enrol_requests_total", "Enrolment requests received, whatever their outcome.", c.metrics.enrols.Load())
	counter("mesh_api_errors_total", "Operator API calls answered with an error.", c.metrics.apiErrors.Load())
	counter("mesh_replies_refused_total", "Requests dropped unanswered and not acted on because their reply subject was not under the requester's own inbox.", c.metrics.repliesRefused.Load())
	counter("mesh_certs_issued_total", "Leaves signed for nodes' CSRs.", c.metrics.certsIssued.Load())
	counter("mesh_csr_refused_total", "Nodes' CSRs refused: a name the node may not hold, a weak key, a CSR that does not parse or verify, an oversized request.", c.metrics.csrRefused.Load())
	counter("mesh_declarations_sent_total", "Declarations published to nodes (previews are not counted).", c.metrics.declarationsSent.Load())
	counter("mesh_declaration_bytes_total", "Bytes of the declarations published: their signed bodies.", c.metrics.declarationBytes.Load())
	counter("mesh_rosters_sent_total", "Roster messages published (once per roster change, to every node).", c.metrics.rostersSent.Load())
	counter("mesh_roster_bytes_total", "Bytes of the roster messages published: their signed bodies.", c.metrics.rosterBytes.Load())
	counter("mesh_blobs_collected_total", "Blobs deleted because no module, node's last declaration or release named them.", c.metrics.blobsCollected.Load())
	counter("mesh_blob_bytes_collected_total", "Bytes of the blobs collected.", c.metrics.blobBytesCollected.Load())
	gauge("mesh_audit_queued", "Operator API calls audited in memory only: the store did not take them yet.", float64(c.auditor.auditQueued()))
	counter("mesh_panics_total", "Panics recovered in a handler or loop of this process; each is logged with its stack.", c.cfg.Panics.Load())
	gauge("go_goroutines", "Goroutines in the process.", float64(runtime.NumGoroutine()))
	if rss, ok := residentBytes(); ok {
		gauge("process_resident_memory_bytes", "Resident memory of the process.", float64(rss))
	}
	w.Write([]byte(b.String()))
}

// residentBytes reads the process's resident set from /proc.
func residentBytes() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * uint64(os.Getpagesize()), true
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
