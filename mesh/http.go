package mesh

import (
	"fmt"
	"net/http"
	"strings"
)

func (c *Controller) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", c.healthz)
	mux.Handle("GET /metrics", c.metricsHandler())
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
