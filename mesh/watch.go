package mesh

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

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
func (c *Controller) setSeq(node string, w *watcher, seq uint64) {
	w.mu.Lock()
	w.seq = seq
	early := w.early
	w.early = nil
	w.mu.Unlock()
	for _, r := range early {
		if r.Preview == w.preview && r.Seq >= seq {
			c.notify(w, r)
			if r.Waiting == "" {
				c.unwatch(node, w)
				return
			}
		}
	}
}

func (c *Controller) notify(w *watcher, r spec.Report) {
	body, _ := json.Marshal(spec.PushEvent{PushID: w.pushID, Report: r})
	// On the serving connection: the progress subject is under the
	// operator's inbox (push checked it), and the bus holds it there.
	if err := c.serving.Publish(w.subject, body); err != nil {
		c.log.Warn("push progress not forwarded", "node", r.Node, "err", err)
	}
}

func (c *Controller) watch(node, pushID, subject string, preview bool) *watcher {
	w := &watcher{pushID: pushID, subject: subject, preview: preview, expires: c.cfg.Now().Add(time.Hour)}
	if subject == "" {
		return w
	}
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	c.watchers[node] = append(c.watchers[node], w)
	return w
}

// dropExpiredWatchers forgets the pushes still waiting, past their expiry,
// for nodes that never answered.
func (c *Controller) dropExpiredWatchers() {
	now := c.cfg.Now()
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	for node, ws := range c.watchers {
		keep := ws[:0]
		for _, w := range ws {
			if now.Before(w.expires) {
				keep = append(keep, w)
			}
		}
		if len(keep) == 0 {
			delete(c.watchers, node)
		} else {
			c.watchers[node] = keep
		}
	}
}

func (c *Controller) unwatch(node string, w *watcher) {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	ws := c.watchers[node]
	for i, x := range ws {
		if x == w {
			c.watchers[node] = append(ws[:i:i], ws[i+1:]...)
			return
		}
	}
}

// forward hands r to the watchers of its node that it answers. A report
// that the declaration waits (for the roster it names) is handed on and
// ends no watch: the apply's report comes later.
func (c *Controller) forward(r spec.Report) {
	c.watchMu.Lock()
	var keep, due []*watcher
	now := c.cfg.Now()
	for _, w := range c.watchers[r.Node] {
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
		delete(c.watchers, r.Node)
	} else {
		c.watchers[r.Node] = keep
	}
	c.watchMu.Unlock()
	for _, w := range due {
		c.notify(w, r)
	}
}
