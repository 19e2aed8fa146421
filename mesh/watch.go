package mesh

import (
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// watches are the pushes waiting for nodes' reports, each forwarded to its
// operator's progress subject.
type watches struct {
	now func() time.Time
	log *slog.Logger
	// publish sends a progress event, on the serving connection.
	publish func(subject string, body []byte) error
	mu      sync.Mutex
	byNode  map[string][]*watcher // per node
}

// watcher forwards one node's next report at or above seq to subject.
type watcher struct {
	mu      sync.Mutex
	preview bool   // waits for a preview's answer, not an apply's
	seq     uint64 // 0 until the send returned
	pushID  string
	subject string
	expires time.Time
	early   []spec.Report // reports that arrived before the send returned
}

// setSeq says which sequence the watcher waits for, and forwards a report of
// it that arrived while the send was still returning.
func (wb *watches) setSeq(node string, w *watcher, seq uint64) {
	w.mu.Lock()
	w.seq = seq
	early := w.early
	w.early = nil
	w.mu.Unlock()
	for _, r := range early {
		if r.Preview == w.preview && r.Seq >= seq {
			wb.notify(w, r)
			if r.Waiting == "" {
				wb.unwatch(node, w)
				return
			}
		}
	}
}

func (wb *watches) notify(w *watcher, r spec.Report) {
	body, _ := json.Marshal(spec.PushEvent{PushID: w.pushID, Report: r})
	// On the serving connection: the progress subject is under the
	// operator's inbox (push checked it), and the bus holds it there.
	if err := wb.publish(w.subject, body); err != nil {
		wb.log.Warn("push progress not forwarded", "node", r.Node, "err", err)
	}
}

func (wb *watches) watch(node, pushID, subject string, preview bool) *watcher {
	w := &watcher{pushID: pushID, subject: subject, preview: preview, expires: wb.now().Add(time.Hour)}
	if subject == "" {
		return w
	}
	wb.mu.Lock()
	defer wb.mu.Unlock()
	wb.byNode[node] = append(wb.byNode[node], w)
	return w
}

// dropExpiredWatchers forgets the pushes still waiting, past their expiry,
// for nodes that never answered.
func (wb *watches) dropExpiredWatchers() {
	now := wb.now()
	wb.mu.Lock()
	defer wb.mu.Unlock()
	for node, ws := range wb.byNode {
		keep := ws[:0]
		for _, w := range ws {
			if now.Before(w.expires) {
				keep = append(keep, w)
			}
		}
		if len(keep) == 0 {
			delete(wb.byNode, node)
		} else {
			wb.byNode[node] = keep
		}
	}
}

func (wb *watches) unwatch(node string, w *watcher) {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	ws := wb.byNode[node]
	for i, x := range ws {
		if x == w {
			wb.byNode[node] = append(ws[:i:i], ws[i+1:]...)
			return
		}
	}
}

// forward hands r to the watchers of its node that it answers. A report
// that the declaration waits (for the roster it names) is handed on and
// ends no watch: the apply's report comes later.
func (wb *watches) forward(r spec.Report) {
	wb.mu.Lock()
	var keep, due []*watcher
	now := wb.now()
	for _, w := range wb.byNode[r.Node] {
		w.mu.Lock()
		switch {
		case now.After(w.expires):
		case r.Preview != w.preview:
			keep = append(keep, w)
		case w.seq != 0 && r.Seq >= w.seq:
			due = append(due, w)
			if r.Waiting != "" {
				keep = append(keep, w)
			}
		case w.seq == 0:
			w.early = append(w.early, r)
			keep = append(keep, w)
		default:
			keep = append(keep, w)
		}
		w.mu.Unlock()
	}
	if len(keep) == 0 {
		delete(wb.byNode, r.Node)
	} else {
		wb.byNode[r.Node] = keep
	}
	wb.mu.Unlock()
	for _, w := range due {
		wb.notify(w, r)
	}
}
