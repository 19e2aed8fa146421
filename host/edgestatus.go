package host

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// edgeStateTick is how often the host looks at its edge's names and sends
// what changed: changes within it are one report.
const edgeStateTick = 2 * time.Second

// acmeRetries is when certmagic tries a failed obtain or renewal again:
// after the n-th failure in a row, acmeRetries[n-1] later (the last one
// over and over), for at most acmeRetrying since the first. They are
// certmagic's own (its retryIntervals and maxRetryDuration), which it
// does not export. A renewal is tried at the first maintenance pass
// after that time.
var acmeRetries = []time.Duration{
	time.Minute, 2 * time.Minute, 2 * time.Minute, 5 * time.Minute,
	10 * time.Minute, 10 * time.Minute, 10 * time.Minute,
	20 * time.Minute, 20 * time.Minute, 20 * time.Minute, 20 * time.Minute,
	30 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute, 30 * time.Minute,
	time.Hour, time.Hour, time.Hour, 2 * time.Hour, 2 * time.Hour,
	3 * time.Hour, 3 * time.Hour, 6 * time.Hour,
}

const acmeRetrying = 30 * 24 * time.Hour

// edgeEvents is what certmagic's events said of each public name: the
// failures since its last success. Safe from any goroutine; the zero
// value is ready.
type edgeEvents struct {
	mu    sync.Mutex
	names map[string]acmeFailure
}

// acmeFailure is a name's failures in a row: the last one's error and
// time, the first one's time, how many, and when certmagic tries again
// (zero: it does not by itself).
type acmeFailure struct {
	err       string
	at, first time.Time
	count     int
	retry     time.Time
}

// record takes certmagic's event with its data, at now: a success clears
// the name's failures, a failure adds one.
func (e *edgeEvents) record(event string, data map[string]any, now time.Time) {
	name, _ := data["identifier"].(string)
	if name == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.names == nil {
		e.names = map[string]acmeFailure{}
	}
	switch event {
	case "cert_obtained":
		delete(e.names, name)
	case "cert_failed":
		err, _ := data["error"].(error)
		if err == nil || errors.Is(err, context.Canceled) {
			return // the name left the roster, or the edge stopped
		}
		f := e.names[name]
		if f.count == 0 {
			f.first = now
		}
		f.count++
		f.err, f.at = spec.Clip(err.Error(), spec.MaxEdgeText), now
		f.retry = retryAfter(f, err)
		e.names[name] = f
	}
}

// retryAfter is when certmagic tries again after failure f, which ended
// with err: never by itself when err says not to or it has tried for
// acmeRetrying.
func retryAfter(f acmeFailure, err error) time.Time {
	var noRetry certmagic.ErrNoRetry
	if errors.As(err, &noRetry) || f.at.Sub(f.first) >= acmeRetrying {
		return time.Time{}
	}
	return f.at.Add(acmeRetries[min(f.count, len(acmeRetries))-1])
}

// of is name's failures in a row (count 0: none since its last success).
func (e *edgeEvents) of(name string) acmeFailure {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.names[name]
}

// keep forgets the names not in names.
func (e *edgeEvents) keep(names map[string]edgeTarget) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for n := range e.names {
		if _, ok := names[n]; !ok {
			delete(e.names, n)
		}
	}
}

// notAfter is when the certificate certmagic holds for name expires (the
// latest, if it holds more than one); zero when it holds none.
func (s *edgeServe) notAfter(name string) time.Time {
	var last time.Time
	for _, c := range s.cache.AllMatchingCertificates(name) {
		if c.Leaf != nil && c.Leaf.NotAfter.After(last) {
			last = c.Leaf.NotAfter
		}
	}
	return last
}

// state is what node's host reports of its edge at now, without its
// time: each public name held with its certificate's state and expiry and
// its failures; no names when no edge runs.
func (g *edge) state(node string, now time.Time) spec.EdgeState {
	st := spec.EdgeState{Node: node}
	if g == nil {
		return st
	}
	g.mu.Lock()
	s, held := g.serves, g.names
	g.mu.Unlock()
	if s == nil {
		return st
	}
	st.Edge = s.spec.Name
	s.events.keep(held)
	var names []string
	for n := range held {
		// The roster's public names are domain names: one that is not
		// would have the whole report refused.
		if spec.CheckDomain(n) == nil {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if len(names) > spec.MaxEdgeNames {
		st.Omitted, names = len(names)-spec.MaxEdgeNames, names[:spec.MaxEdgeNames]
	}
	for _, name := range names {
		n := spec.EdgeName{Name: name, NotAfter: s.notAfter(name)}
		f := s.events.of(name)
		if f.count > 0 {
			n.Error, n.ErrorAt, n.Retry = f.err, f.at, f.retry
		}
		switch {
		case !n.NotAfter.IsZero() && now.Before(n.NotAfter):
			n.State = spec.EdgeValid
		case !n.NotAfter.IsZero():
			n.State = spec.EdgeExpired
		case f.count > 0:
			n.State = spec.EdgeFailed
		default:
			n.State = spec.EdgeObtaining
		}
		st.Names = append(st.Names, n)
	}
	return st
}

// edgeReporter sends the edge's report: when it changes (looked at every
// tick), when the bus connection came back (a controller started again
// has none), and every spec.EdgeStateEvery. Nothing is sent while no edge
// has run.
type edgeReporter struct {
	edge *edge
	node string
	tick time.Duration
	// send sends a report; reconnects counts the bus connection's
	// reconnections.
	send       func(spec.EdgeState) error
	reconnects func() uint64
}

// newEdgeReporter reports g's state as node's over nc.
func newEdgeReporter(g *edge, node string, nc *nats.Conn) *edgeReporter {
	return &edgeReporter{edge: g, node: node, tick: edgeStateTick,
		send:       func(st spec.EdgeState) error { return publish(nc, spec.NodeSubject(node, spec.KindEdgeState), st) },
		reconnects: func() uint64 { return nc.Stats().Reconnects }}
}

// run reports until ctx ends.
func (r *edgeReporter) run(ctx context.Context) {
	if r.edge == nil {
		return
	}
	t := time.NewTicker(r.tick)
	defer t.Stop()
	var sent *spec.EdgeState
	var sentAt time.Time
	var reconnects uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		st := r.edge.state(r.node, now)
		rc := r.reconnects()
		switch {
		case sent == nil && st.Edge == "":
			continue
		case sent != nil && reflect.DeepEqual(*sent, st) && rc == reconnects && now.Sub(sentAt) < spec.EdgeStateEvery:
			continue
		}
		st.Time = now.UTC()
		if err := r.send(st); err != nil {
			r.edge.log.Debug("edge state not sent", "err", err)
			continue
		}
		st.Time = time.Time{}
		sent, sentAt, reconnects = &st, now, rc
	}
}
