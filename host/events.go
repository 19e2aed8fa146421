package host

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"

	"github.com/mesh-fleet/mesh/spec"
)

// eventPassEvery is the least time between two passes the engine's events
// cause. Two seconds: a container that stops is started again and reported
// within seconds, while one that stops as soon as it starts (a crash loop)
// costs at most one pass and one report every 2 s, instead of one per
// start (a start takes some 100 ms, so a report ten times a second).
const eventPassEvery = 2 * time.Second

// eventSettle is how long the first event after a quiet spell waits for
// those that come with it before its pass: a removal by hand is a die and
// then a destroy, and a pass between the two would fail to start a
// container being removed.
const eventSettle = 250 * time.Millisecond

// eventRetry is how often the event stream is opened again while the
// engine does not answer: an engine back from a restart is followed within
// a second, at the cost of one version call a second while it is away.
const eventRetry = time.Second

// follow follows the engine's events of the node's containers until
// ctx ends. A container that dies without the host stopping it is recorded
// and asks for a pass (kick); so does a container removed by hand, and the
// stream coming back after it was lost (the engine restarted: what happened
// meanwhile is unknown). While the engine does not answer, it tries again
// every eventRetry.
func (w *engineWatch) follow(ctx context.Context, kick chan<- struct{}) {
	d := w.docker
	if d == nil {
		return
	}
	lost := false
	for ctx.Err() == nil {
		opened, err := w.followStream(ctx, kick, lost)
		if ctx.Err() != nil {
			return
		}
		if opened || !lost {
			w.log.Warn("container events not followed; trying again every "+eventRetry.String(), "engine", d.Endpoint(), "err", err)
		}
		lost = true
		select {
		case <-ctx.Done():
			return
		case <-time.After(eventRetry):
		}
	}
}

// followStream reads one stream of events until it ends, and says whether
// it was open (it stood for eventSettle, or brought an event) and why it
// ended. again is set when an earlier stream was lost: once this one is
// open, a pass is asked for.
func (w *engineWatch) followStream(ctx context.Context, kick chan<- struct{}, again bool) (bool, error) {
	d := w.docker
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := d.Ping(ctx); err != nil {
		return false, err
	}
	res := d.cli.Events(ctx, client.EventsListOptions{Filters: make(client.Filters).
		Add("type", string(events.ContainerEventType)).
		Add("label", spec.LabelNode+"="+w.node).
		Add("event", string(events.ActionDie), string(events.ActionOOM), string(events.ActionDestroy))})
	opened := false
	standing := time.After(eventSettle)
	for {
		select {
		case <-standing:
			opened, standing = true, nil
			if again {
				w.log.Info("following container events again", "engine", d.Endpoint())
				nudge(kick)
			}
		case m := <-res.Messages:
			opened = true
			w.safely("container event", func() { w.onEvent(m, kick) })
		case err := <-res.Err:
			if err == nil || errors.Is(err, io.EOF) {
				err = errors.New("the engine closed the event stream")
			}
			return opened, d.wrap("follow container events", err)
		}
	}
}

// onEvent records what one event says of the node's containers. A
// die or destroy of a container the host itself stopped (to replace or
// remove it) is no news.
func (w *engineWatch) onEvent(m events.Message, kick chan<- struct{}) {
	attrs := m.Actor.Attributes
	if attrs[spec.LabelNode] != w.node || w.docker.stoppedByHost(m.Actor.ID) {
		return
	}
	switch m.Action {
	case events.ActionOOM:
		w.stops.markOOM(m.Actor.ID)
		return
	case events.ActionDie:
		at := time.Unix(0, m.TimeNano)
		if m.TimeNano == 0 {
			at = time.Now()
		}
		st := stop{at: at, container: attrs["name"], exitCode: attrs["exitCode"], oom: w.stops.takeOOM(m.Actor.ID)}
		w.docker.died(st.container)
		w.stops.record(attrs[spec.LabelResource], st)
		w.log.Info("container stopped", "container", st.container, "exit_code", st.exitCode, "oom", st.oom)
	case events.ActionDestroy:
		w.log.Info("container removed", "container", attrs["name"])
	default:
		return
	}
	nudge(kick)
}

// nudge signals ch without waiting: a signal already pending stands for
// this one too.
func nudge(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// pace turns kicks into passes until ctx ends: the first kick after a quiet
// spell goes through after settle, later ones once every has passed since
// the last pass went through, and every kick that comes while one waits is
// merged into it.
func pace(ctx context.Context, kicks <-chan struct{}, passes chan<- struct{}, settle, every time.Duration) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-kicks:
		}
		wait := max(settle, time.Until(last.Add(every)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		// The kicks that came meanwhile are this pass's too.
		select {
		case <-kicks:
		default:
		}
		select {
		case <-ctx.Done():
			return
		case passes <- struct{}{}:
		}
		last = time.Now()
	}
}

// recent remembers keys (container IDs or names) for a while, with when.
type recent struct {
	mu sync.Mutex
	at map[string]time.Time
}

// recentMemory is how long recent remembers: far longer than a stop
// (stopTimeout), a removal, or a pass take.
const recentMemory = 10 * time.Minute

func (r *recent) mark(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.at == nil {
		r.at = map[string]time.Time{}
	}
	for k, at := range r.at {
		if now.Sub(at) > recentMemory {
			delete(r.at, k)
		}
	}
	r.at[key] = now
}

func (r *recent) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.at[key]
	return ok && time.Since(at) <= recentMemory
}

// stopping records that the host is about to stop or remove container id:
// its die and destroy are no news.
func (d *Docker) stopping(id string) { d.hostStops.mark(id) }

// stoppedByHost says whether the host itself stopped container id.
func (d *Docker) stoppedByHost(id string) bool { return d.hostStops.has(id) }

// died records that the engine said container name died.
func (d *Docker) died(name string) { d.deaths.mark(name) }

// diedRecently says whether the engine said container name died lately. The
// engine's listing of running containers still lists a container for a
// while after its death is told (an inspect waits until the engine has
// settled it): such a container is inspected, not taken from the listing.
func (d *Docker) diedRecently(name string) bool { return d != nil && d.deaths.has(name) }

// followContainers starts following the engine's events of the node's
// containers, and returns the passes they ask for, paced.
func (w *engineWatch) followContainers(ctx context.Context) <-chan struct{} {
	passes := make(chan struct{})
	go w.safely("event pacing", func() { pace(ctx, w.kicks, passes, eventSettle, eventPassEvery) })
	go w.safely("container events", func() { w.follow(ctx, w.kicks) })
	return passes
}
