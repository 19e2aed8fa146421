package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// panickyStore is the real store but for the reads a test makes panic: the
// seam where a bug in a handler is injected.
type panickyStore struct {
	*store.DB
	heartbeat, facts, tokens bool
}

func (s panickyStore) RecordHeartbeats(ctx context.Context, hbs []spec.Heartbeat, at time.Time) (map[string]error, error) {
	if s.heartbeat {
		panic("injected: heartbeats")
	}
	return s.DB.RecordHeartbeats(ctx, hbs, at)
}

// RecordFacts panics for facts whose kernel is "injected" (an enrolment
// records facts too).
func (s panickyStore) RecordFacts(ctx context.Context, f spec.Facts, at time.Time) error {
	if s.facts && f.Kernel == "injected" {
		panic("injected: facts")
	}
	return s.DB.RecordFacts(ctx, f, at)
}

func (s panickyStore) Tokens(ctx context.Context) ([]store.Token, error) {
	if s.tokens {
		panic("injected: tokens")
	}
	return s.DB.Tokens(ctx)
}

// TestPanicInAHandlerLeavesTheBusServing injects panics into a bus handler
// with no caller (facts), the loop that writes heartbeats, and an API verb:
// each is recovered and counted, the caller is answered with a failure, and
// the bus and every other handler go on answering.
func TestPanicInAHandlerLeavesTheBusServing(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, _ := newControllerWith(t, clk, func(db *store.DB) Store {
		return panickyStore{DB: db, heartbeat: true, facts: true, tokens: true}
	})
	op := operatorConn(t, c)
	api := func(verb string, req any) spec.Reply {
		t.Helper()
		m, err := op.Request(spec.APIPrefix+verb, mustJSON(t, req), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: no answer: %v", verb, err)
		}
		var r spec.Reply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Facts: no caller, the handler panics in the store; a heartbeat: the
	// loop that writes them panics in the store.
	facts := mustJSON(t, spec.Facts{Node: "alpha", Time: clk.Now(), Kernel: "injected"})
	if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindFacts), facts); err != nil {
		t.Fatal(err)
	}
	hb := mustJSON(t, spec.Heartbeat{Node: "alpha", Time: clk.Now(), Protocol: spec.Protocol})
	if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindHeartbeat), hb); err != nil {
		t.Fatal(err)
	}
	// An API verb that panics is answered with a failure that says so.
	if r := api(spec.TokenList.Name, spec.TokenListRequest{}); !strings.Contains(r.Error, "internal error") {
		t.Fatalf("token list that panicked answered %+v, want a failure naming an internal error", r)
	}
	// The bus, and the other handlers, still answer.
	r := api(spec.NodeList.Name, spec.NodeListRequest{})
	if r.Error != "" {
		t.Fatalf("node list after the panics: %s", r.Error)
	}
	var nodes spec.NodeListResult
	if err := json.Unmarshal(r.Result, &nodes); err != nil || len(nodes.Nodes) != 1 {
		t.Fatalf("node list after the panics: %s (%v)", r.Result, err)
	}
	poll.Until(t, 10*time.Second, "three panics counted (the facts', the heartbeat batch's and the verb's)", func() error {
		n := c.cfg.Panics.Load()
		if n == 3 {
			return nil
		}
		return fmt.Errorf("mesh_panics_total counts %d", n)
	})
	resp, err := http.Get("http://" + c.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "\nmesh_panics_total 3\n") {
		t.Fatalf("/metrics does not count the three panics:\n%s", body)
	}
	// The in-process bus itself still routes between clients.
	sub, err := c.nc.SubscribeSync("probe.after.panics")
	if err != nil {
		t.Fatal(err)
	}
	c.nc.Publish("probe.after.panics", []byte("x"))
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the bus does not route after the panics: %v", err)
	}
}

// nodesPanic is the real store but for Nodes, which panics once on is set:
// the seam where a bug in an HTTP handler (/metrics reads the nodes) is
// injected after the controller started.
type nodesPanic struct {
	*store.DB
	on *atomic.Bool
}

func (s nodesPanic) Nodes(ctx context.Context) ([]store.Node, error) {
	if s.on.Load() {
		panic("injected: nodes")
	}
	return s.DB.Nodes(ctx)
}

// TestPanicInAnHTTPHandlerIsA500: a panic in an HTTP handler is answered
// with a 500 that says an internal error happened (net/http alone drops the
// connection and says nothing), counted in mesh_panics_total, and the other
// HTTP handlers and the bus go on answering.
func TestPanicInAnHTTPHandlerIsA500(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	on := &atomic.Bool{}
	c, _ := newControllerWith(t, clk, func(db *store.DB) Store { return nodesPanic{DB: db, on: on} })
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + c.HTTPAddr() + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	on.Store(true)
	if code, body := get("/metrics"); code != http.StatusInternalServerError || !strings.Contains(body, "internal error") {
		t.Fatalf("GET /metrics that panicked: %d %q, want 500 naming an internal error", code, body)
	}
	if n := c.cfg.Panics.Load(); n != 1 {
		t.Errorf("mesh_panics_total counts %d, want 1", n)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz after the panic: %d %q", code, body)
	}
	on.Store(false)
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "\nmesh_panics_total 1\n") {
		t.Errorf("GET /metrics after the panic: %d, want 200 counting one panic:\n%s", code, body)
	}
	op := operatorConn(t, c)
	if _, err := op.Request(spec.APIPrefix+spec.NodeList.Name, mustJSON(t, spec.NodeListRequest{}), 10*time.Second); err != nil {
		t.Errorf("the bus after an HTTP handler's panic: %v", err)
	}
}

// TestReportBeforeAnyPush: a report that reaches a controller before any
// push since it started (a host correcting drift at its start) is recorded,
// and nothing panics (the push watchers' map was made by the first push).
func TestReportBeforeAnyPush(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	// Sent before this start (a report of a sequence never sent is
	// dropped): send records and publishes without a push's watchers.
	for range 3 {
		if _, _, err := c.sender.send(context.Background(), "alpha", content{resources: nil}, resendAll); err != nil {
			t.Fatal(err)
		}
	}
	r := mustJSON(t, spec.Report{Node: "alpha", Seq: 3, Time: clk.Now(), Results: []spec.ResourceResult{}})
	if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindReport), r); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the early report recorded", func() error {
		got, err := db.LastReport(context.Background(), "alpha")
		if err == nil && got.Seq != 3 {
			err = fmt.Errorf("the last report recorded is %+v", got)
		}
		return err
	})
	if n := c.cfg.Panics.Load(); n != 0 {
		t.Fatalf("a report before any push panicked %d time(s)", n)
	}
}

// BenchmarkGuardMsg: what the recovering wrapper costs a handler that does
// nothing, against the same handler called bare (the peer in this run).
func BenchmarkGuardMsg(b *testing.B) {
	c := &Controller{cfg: Config{Panics: new(atomic.Uint64)}, guard: guard{panics: new(atomic.Uint64)}}
	m := &nats.Msg{Subject: spec.NodeSubject("alpha", spec.KindHeartbeat)}
	var n int
	h := func(*nats.Msg, requester) { n++ }
	b.Run("bare", func(b *testing.B) {
		for b.Loop() {
			h(m, byNodeSubject(m))
		}
	})
	b.Run("guarded", func(b *testing.B) {
		g := c.guardMsg("bench", byNodeSubject, h)
		for b.Loop() {
			g(m)
		}
	})
}
