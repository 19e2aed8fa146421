package host

import (
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestNoteStops: what the engine's events said of a container reaches its
// result. One stop since the last pass is told as a note (and makes the
// pass report); crashLimit stops within crashWindow are a failure, with a
// pass due when it may clear; stops a pass already told, or older than the
// window, say nothing.
func TestNoteStops(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	const web = "web:container:web"
	stopAt := func(ago time.Duration) stop {
		return stop{at: now.Add(-ago), container: "alpha-web", exitCode: "1"}
	}
	tests := []struct {
		name      string
		stops     []stop
		told      bool // a pass already took note of them
		result    spec.ResourceResult
		want      spec.ResourceResult
		wantTold  bool
		wantCheck bool
	}{
		{name: "no stop", result: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Unchanged},
			want: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Unchanged}},
		{name: "stopped once, the engine started it again", stops: []stop{stopAt(time.Second)},
			result: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Unchanged},
			want: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Unchanged,
				Note: "it had stopped at 2026-05-01T11:59:59Z with exit code 1, and was running again (started by the engine's restart policy, or by hand)"},
			wantTold: true},
		{name: "stopped once, the pass started it again", stops: []stop{stopAt(time.Second)},
			result:   spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Changed, Note: "started again: it had exited with code 1"},
			want:     spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Changed, Note: "started again: it had exited with code 1"},
			wantTold: true},
		{name: "stopped once, already told", stops: []stop{stopAt(time.Second)}, told: true,
			result: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Unchanged},
			want:   spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Unchanged}},
		{name: "keeps stopping", stops: []stop{stopAt(4 * time.Minute), stopAt(2 * time.Second), stopAt(time.Second)},
			result: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Changed, Note: "started again: it had exited with code 1"},
			want: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Failed,
				Error: "it keeps stopping: 3 times in the last 5m0s, last at 2026-05-01T11:59:59Z with exit code 1 (docker logs alpha-web says why)"},
			wantTold: true, wantCheck: true},
		{name: "kept stopping, told already: still failing", stops: []stop{stopAt(4 * time.Minute), stopAt(2 * time.Second), stopAt(time.Second)}, told: true,
			result: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Unchanged},
			want: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Failed,
				Error: "it keeps stopping: 3 times in the last 5m0s, last at 2026-05-01T11:59:59Z with exit code 1 (docker logs alpha-web says why)"},
			wantTold: true, wantCheck: true},
		{name: "the oldest stop left the window", stops: []stop{stopAt(6 * time.Minute), stopAt(2 * time.Second), stopAt(time.Second)}, told: true,
			result: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Unchanged},
			want:   spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Unchanged}},
		{name: "removed", stops: []stop{stopAt(time.Second)},
			result: spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Removed},
			want:   spec.ResourceResult{Name: web, Kind: spec.KindContainer, Outcome: spec.Removed}},
	}
	for _, tt := range tests {
		w := &engineWatch{kicks: make(chan struct{}, 1)}
		for _, st := range tt.stops {
			w.stops.record(web, st)
		}
		// Recorded stops are pruned as of the newest one; the oldest of
		// these may already be gone, as it would be.
		if tt.told {
			w.stops.fresh = map[string]bool{}
		}
		results := []spec.ResourceResult{tt.result}
		told := w.noteStops(results, now)
		if results[0] != tt.want || told != tt.wantTold || (w.recheck != nil) != tt.wantCheck {
			t.Errorf("%s:\n got %+v, told %v, recheck %v\nwant %+v, told %v, recheck %v",
				tt.name, results[0], told, w.recheck != nil, tt.want, tt.wantTold, tt.wantCheck)
		}
		if w.recheck != nil {
			w.recheck.Stop()
		}
	}
}
