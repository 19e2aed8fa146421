package host

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// A container that stopped crashLimit times within crashWindow, without the
// host stopping it, keeps stopping: its result is a failure, whoever started
// it again, until it has stopped fewer times within the window. Five
// minutes: the engine's restart policy waits up to a minute between two
// starts of a container that keeps failing, so a shorter window would
// clear the failure while the container still fails.
const (
	crashLimit  = 3
	crashWindow = 5 * time.Minute
)

// stop is one stop of a node's container that the host did not cause, as
// the engine's events told it.
type stop struct {
	at        time.Time
	container string // the engine's name of the container
	exitCode  string
	oom       bool
}

// stops are the stops of the node's containers within crashWindow, by
// resource name.
type stops struct {
	mu     sync.Mutex
	byName map[string][]stop
	// fresh are the resources that stopped since the last pass took note.
	fresh map[string]bool
	// oom are the containers (by engine ID) the engine said ran out of
	// memory, until they die.
	oom map[string]bool
}

func (s *stops) record(resource string, st stop) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byName == nil {
		s.byName, s.fresh = map[string][]stop{}, map[string]bool{}
	}
	s.byName[resource] = append(s.byName[resource], st)
	s.fresh[resource] = true
	s.prune(st.at)
}

func (s *stops) markOOM(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.oom == nil {
		s.oom = map[string]bool{}
	}
	s.oom[id] = true
}

func (s *stops) takeOOM(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	oom := s.oom[id]
	delete(s.oom, id)
	return oom
}

// prune forgets the stops older than crashWindow at now. s.mu is held.
func (s *stops) prune(now time.Time) {
	for name, list := range s.byName {
		i := sort.Search(len(list), func(i int) bool { return now.Sub(list[i].at) < crashWindow })
		if i == len(list) {
			delete(s.byName, name)
			continue
		}
		s.byName[name] = list[i:]
	}
}

// noteStops tells in results what the engine's events said of the node's
// containers since the last pass, and reports whether it told anything (so
// that a pass that changed nothing still reports it). A container that
// stopped crashLimit times within crashWindow fails: it keeps stopping,
// whoever starts it again, and a pass is due when the oldest of those
// stops leaves the window. One that stopped once and runs again says how it
// had stopped, unless the result already says it.
func (w *engineWatch) noteStops(results []spec.ResourceResult, now time.Time) bool {
	w.stops.mu.Lock()
	defer w.stops.mu.Unlock()
	w.stops.prune(now)
	told := false
	var recheck time.Time
	for i := range results {
		r := &results[i]
		list := w.stops.byName[r.Name]
		if r.Kind != spec.KindContainer || r.Outcome == spec.Removed || len(list) == 0 {
			continue
		}
		last := list[len(list)-1]
		if len(list) >= crashLimit {
			if r.Outcome != spec.Failed {
				r.Outcome, r.Note = spec.Failed, ""
				r.Error = fmt.Sprintf("it keeps stopping: %d times in the last %s, last at %s%s (docker logs %s says why)",
					len(list), crashWindow, last.at.UTC().Format(time.RFC3339), how(last), last.container)
			}
			told = true
			if at := list[len(list)-crashLimit].at.Add(crashWindow); recheck.IsZero() || at.Before(recheck) {
				recheck = at
			}
			continue
		}
		if !w.stops.fresh[r.Name] {
			continue
		}
		told = true
		if r.Outcome == spec.Failed || r.Note != "" {
			continue
		}
		r.Note = fmt.Sprintf("it had stopped at %s%s", last.at.UTC().Format(time.RFC3339), how(last))
		if r.Outcome == spec.Unchanged {
			r.Note += ", and was running again (started by the engine's restart policy, or by hand)"
		}
	}
	w.stops.fresh = map[string]bool{}
	if !recheck.IsZero() {
		w.recheckAt(recheck.Sub(now))
	}
	return told
}

// how says how a container stopped: its exit code, out of memory.
func how(st stop) string {
	s := ""
	if st.exitCode != "" {
		s = " with exit code " + st.exitCode
	}
	if st.oom {
		s += ", out of memory"
	}
	return s
}

// recheckAt has a pass made after d, when a container that keeps stopping
// may have stopped fewer times within the window: its failure then clears
// without waiting for the periodic reconcile.
func (w *engineWatch) recheckAt(d time.Duration) {
	if w.recheck != nil {
		w.recheck.Stop()
	}
	kick := w.kicks
	w.recheck = time.AfterFunc(d, func() { nudge(kick) })
}
