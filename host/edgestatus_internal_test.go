package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/spec"
)

// TestEdgeEventsRetry: each failure in a row is retried after
// certmagic's next interval, counted from that failure; a success clears
// them; an error that says not to retry has no retry; a failure of a
// cancelled obtaining (the name left) is not one; a name that leaves is
// forgotten.
func TestEdgeEventsRetry(t *testing.T) {
	t.Parallel()
	var e edgeEvents
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	fail := func(err error, now time.Time) {
		e.record("cert_failed", map[string]any{"identifier": "a.example.org", "error": err}, now)
	}
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 2 * time.Minute, 5 * time.Minute} {
		now := at.Add(time.Duration(i) * time.Hour)
		fail(fmt.Errorf("attempt %d: connection refused", i), now)
		f := e.of("a.example.org")
		if f.count != i+1 || f.at != now || f.retry != now.Add(want) || f.err != fmt.Sprintf("attempt %d: connection refused", i) {
			t.Fatalf("after failure %d: %+v, want a retry %s later", i+1, f, want)
		}
	}
	for range 40 {
		fail(errors.New("again"), at.Add(2*time.Hour))
	}
	if f := e.of("a.example.org"); f.retry != f.at.Add(6*time.Hour) {
		t.Errorf("after many failures: %+v, want a retry 6h later", f)
	}
	fail(errors.New("a month on"), at.Add(acmeRetrying))
	if f := e.of("a.example.org"); !f.retry.IsZero() {
		t.Errorf("failing for %s: %+v, want no retry", acmeRetrying, f)
	}
	e.record("cert_obtained", map[string]any{"identifier": "a.example.org"}, at)
	if f := e.of("a.example.org"); f.count != 0 || f.err != "" {
		t.Errorf("once obtained: %+v, want no failure", f)
	}
	fail(certmagic.ErrNoRetry{Err: errors.New("refused for good")}, at)
	if f := e.of("a.example.org"); f.count != 1 || !f.retry.IsZero() {
		t.Errorf("an error not retried: %+v, want no retry", f)
	}
	e.record("cert_failed", map[string]any{"identifier": "b.example.org", "error": fmt.Errorf("obtain: %w", context.Canceled)}, at)
	e.record("cert_failed", map[string]any{"identifier": "c.example.org", "error": errors.New(strings.Repeat("\x1b", 1<<20))}, at)
	if f := e.of("b.example.org"); f.count != 0 {
		t.Errorf("a cancelled obtaining: %+v, want no failure", f)
	}
	if f := e.of("c.example.org"); spec.EncodedLen(f.err) > spec.MaxEdgeText {
		t.Errorf("a huge error kept as %d bytes", spec.EncodedLen(f.err))
	}
	e.keep(map[string]edgeTarget{"c.example.org": {}})
	if f := e.of("a.example.org"); f.count != 0 {
		t.Errorf("a name gone: %+v, want it forgotten", f)
	}
}

// TestEdgeStateReportsCertificatesAndFailures: against Pebble the edge's
// report reaches valid with the certificate's expiry, and is sent once
// for a change, not every tick, and again when the bus connection came
// back. Configured again with roots Pebble's TLS does not verify against
// (an ACME CA failing), a new name is failed with the error and a retry
// a minute later, and a renewal forced of the name obtained before fails
// the same way while that name is still served, its certificate valid.
func TestEdgeStateReportsCertificatesAndFailures(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed: install it (.ci/run does); the test verifies the edge's chains with it")
	}
	httpAddr, httpsAddr := testport.Addr(t, "127.0.0.1"), testport.Addr(t, "127.0.0.1")
	httpPort, httpsPort := pebbletest.Port(t, httpAddr), pebbletest.Port(t, httpsAddr)
	pb := pebbletest.Start(t, httpPort, httpsPort)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "page") }))
	t.Cleanup(backend.Close)
	backends := map[string]string{"status-one.example.test": backend.URL}

	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the edge's log:\n%s", logs.String())
		}
	})
	g := newEdge(filepath.Join(t.TempDir(), EdgeDir), "", slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(g.stop)
	g.take(edgeRoster(t, backends))

	var mu sync.Mutex
	var sent []spec.EdgeState
	var reconnects atomic.Uint64
	var ticks atomic.Int64 // the reporter asks for the reconnections once a tick
	r := &edgeReporter{edge: g, node: "alpha", tick: 20 * time.Millisecond,
		send:       func(st spec.EdgeState) error { mu.Lock(); defer mu.Unlock(); sent = append(sent, st); return nil },
		reconnects: func() uint64 { ticks.Add(1); return reconnects.Load() }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.run(ctx)
	last := func() (spec.EdgeState, int) {
		mu.Lock()
		defer mu.Unlock()
		if len(sent) == 0 {
			return spec.EdgeState{}, 0
		}
		return sent[len(sent)-1], len(sent)
	}
	nameIn := func(st spec.EdgeState, name string) spec.EdgeName {
		for _, n := range st.Names {
			if n.Name == name {
				return n
			}
		}
		return spec.EdgeName{}
	}
	// waitTicks waits for the reporter to look ten times more.
	waitTicks := func() {
		t.Helper()
		from := ticks.Load()
		poll.Until(t, 5*time.Second, "ten ticks", func() error {
			if ticks.Load() >= from+10 {
				return nil
			}
			return errors.New("")
		})
	}
	waitTicks()
	if _, n := last(); n != 0 {
		t.Errorf("%d reports sent while no edge runs, want none", n)
	}

	e := spec.EdgeSpec{Name: "edge", HTTP: httpAddr, HTTPS: httpsAddr, ACMECA: pb.Directory, ACMERoots: pb.TLSRoots}
	if err := g.configure(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	var one spec.EdgeName
	poll.Until(t, 60*time.Second, "status-one.example.test reported valid", func() error {
		st, _ := last()
		one = nameIn(st, "status-one.example.test")
		if st.Edge == "edge" && st.Node == "alpha" && one.State == spec.EdgeValid && st.Check() == nil {
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
	if d := time.Until(one.NotAfter); d < 80*24*time.Hour || one.Error != "" {
		t.Errorf("valid: %+v, want an expiry about 90 days on and no error", one)
	}
	_, n := last()
	waitTicks()
	if _, again := last(); again != n {
		t.Errorf("%d reports sent, then %d with nothing changed, want none more", n, again)
	}
	reconnects.Add(1)
	poll.Until(t, 5*time.Second, "the report sent again on reconnection", func() error {
		st, again := last()
		if again == n+1 && nameIn(st, "status-one.example.test").State == spec.EdgeValid {
			return nil
		}
		return fmt.Errorf("%d sent, then %d", n, again)
	})

	// Pebble's issuing root is not the root of its TLS: every ACME
	// request fails to verify.
	e.ACMERoots = pb.Root
	backends["status-two.example.test"] = backend.URL
	g.take(edgeRoster(t, backends))
	if err := g.configure(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	var two spec.EdgeName
	poll.Until(t, 30*time.Second, "status-two.example.test reported failed", func() error {
		st, _ := last()
		two, one = nameIn(st, "status-two.example.test"), nameIn(st, "status-one.example.test")
		if two.State == spec.EdgeFailed && one.State == spec.EdgeValid {
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
	if !strings.Contains(two.Error, "certificate") || two.ErrorAt.IsZero() || two.Retry.Sub(two.ErrorAt) != time.Minute || !two.NotAfter.IsZero() {
		t.Errorf("failed: %+v, want the TLS error and a retry a minute after it", two)
	}

	g.mu.Lock()
	s := g.serves
	g.mu.Unlock()
	renewing, stopRenewing := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.magic.RenewCertAsync(renewing, "status-one.example.test", true) }()
	t.Cleanup(func() { stopRenewing(); <-done })
	poll.Until(t, 30*time.Second, "status-one.example.test's renewal reported failed", func() error {
		st, _ := last()
		one = nameIn(st, "status-one.example.test")
		if one.Error != "" {
			return nil
		}
		return fmt.Errorf("%+v", st)
	})
	if one.State != spec.EdgeValid || time.Until(one.NotAfter) < 80*24*time.Hour || one.Retry.Sub(one.ErrorAt) != time.Minute {
		t.Errorf("a renewal failed: %+v, want still valid with its expiry, the error and a retry", one)
	}
	url := fmt.Sprintf("https://status-one.example.test:%d/", httpsPort)
	if out, err := curl(pb.Root, httpsPort, "status-one.example.test", url); err != nil || !strings.Contains(out, "page") {
		t.Errorf("status-one.example.test while its CA fails: %q (%v), want it served", out, err)
	}
}
