package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// profiler serves Go's profiles of the process (net/http/pprof) on a
// loopback address, when the operator asks for it (--pprof): the heap of
// a controller with its fleet connected, its CPU during a push.
type profiler struct {
	addr  string
	log   *slog.Logger
	ready chan struct{}
}

func newProfiler(addr string, log *slog.Logger) *profiler {
	return &profiler{addr: addr, log: log, ready: make(chan struct{})}
}

// Run serves until ctx ends. An address it cannot bind is an error.
func (p *profiler) Run(ctx context.Context) error {
	l, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("bind --pprof %s: %w", p.addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	p.log.Info("profiles served", "addr", l.Addr().String())
	close(p.ready)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case <-ctx.Done():
		srv.Close()
		<-done
		return nil
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serve --pprof %s: %w", p.addr, err)
	}
}
