package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// The open pages follow the fleet through one hub: while a stream is open
// it reads status when the Source says something reached the controller
// (at most every lookGap), when the next node would turn silent, and at
// least every lookEvery; each stream sends its page a "change" event
// when what status says, or how many facts and reports were recorded,
// differs from what its page shows (how long ago nodes were heard
// aside), and a "heard" event with the nodes heard since it last said.
const (
	lookGap   = 250 * time.Millisecond
	lookEvery = 30 * time.Second
	// keepAlive is how often a stream with nothing to say sends a comment,
	// so that a proxy between does not close it as idle.
	keepAlive = 30 * time.Second
	// silenceSlack is waited past a node's silence deadline before status
	// is read again, so that the read finds it silent.
	silenceSlack = 50 * time.Millisecond
)

// snapshot is one reading of status, as the streams need it.
type snapshot struct {
	digest string
	at     time.Time
	heard  map[string]time.Time
}

// follower is one open stream: the latest snapshot not yet taken.
type follower struct{ next chan *snapshot }

type hub struct {
	src  Source
	now  func() time.Time
	log  *slog.Logger
	wake chan struct{}
	done chan struct{} // closed when run returns: the streams end

	mu        sync.Mutex
	followers map[*follower]bool
	last      *snapshot
}

func newHub(src Source, now func() time.Time, log *slog.Logger) *hub {
	return &hub{src: src, now: now, log: log, wake: make(chan struct{}, 1), done: make(chan struct{}), followers: map[*follower]bool{}}
}

// follow adds a stream; the hub reads status for it at once.
func (h *hub) follow() *follower {
	f := &follower{next: make(chan *snapshot, 1)}
	h.mu.Lock()
	h.followers[f] = true
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return f
}

func (h *hub) leave(f *follower) {
	h.mu.Lock()
	delete(h.followers, f)
	h.mu.Unlock()
}

// watched is how many streams are open.
func (h *hub) watched() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.followers)
}

// run reads status for the streams until ctx ends.
func (h *hub) run(ctx context.Context) {
	defer close(h.done)
	timer := time.NewTimer(lookEvery)
	defer timer.Stop()
	var lastLook time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.src.Changes():
		case <-h.wake:
		case <-timer.C:
		}
		if h.watched() == 0 {
			continue
		}
		if wait := lookGap - h.now().Sub(lastLook); wait > 0 {
			timer.Reset(wait)
			continue
		}
		lastLook = h.now()
		timer.Reset(h.look(ctx))
	}
}

// look reads status, hands the snapshot to every stream, and says when to
// look again though nothing reaches the controller: when the next node
// heard turns silent.
func (h *hub) look(ctx context.Context) time.Duration {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	recorded := h.src.Recorded()
	st, err := h.src.Status(ctx)
	if err != nil {
		h.log.Warn("status for the live pages not read", "err", err)
		return lookEvery
	}
	s := &snapshot{digest: digestOf(st, recorded), at: st.Time, heard: map[string]time.Time{}}
	next := lookEvery
	for _, n := range st.Nodes {
		if n.LastHeard == nil {
			continue
		}
		s.heard[n.Node] = *n.LastHeard
		if !n.Silent {
			deadline := n.LastHeard.Add(h.src.SilentAfter(time.Duration(n.HeartbeatMS)*time.Millisecond) + silenceSlack)
			next = min(next, max(deadline.Sub(st.Time), lookGap))
		}
	}
	h.mu.Lock()
	h.last = s
	for f := range h.followers {
		select {
		case <-f.next:
		default:
		}
		f.next <- s
	}
	h.mu.Unlock()
	return next
}

// goDuration is a Go duration's text ("12s", "1m30.5s", "500ms"): how
// long a node has been silent changes each second and is not a change of
// the page's.
var goDuration = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s|m|h)(\d+(\.\d+)?(ns|µs|ms|s|m|h))*\b`)

// status is the source's status and its digest, for a page made from
// it and from what the source says after: the count of what was recorded
// is read first, so a page that may show facts or a report newer than
// its digest says gets a "change" from its stream.
func (p *Pages) status(ctx context.Context) (spec.StatusResult, string, error) {
	recorded := p.src.Recorded()
	st, err := p.src.Status(ctx)
	if err != nil {
		return spec.StatusResult{}, "", err
	}
	return st, digestOf(st, recorded), nil
}

// digestOf is what a page shows of st, less the times that move on by
// themselves, and of the facts and reports the source has recorded (of
// which status says only some: a node's kernel, a resource's last
// change), by their count: two answers with the same digest show the
// same page.
func digestOf(st spec.StatusResult, recorded uint64) string {
	st.Time = time.Time{}
	st.Nodes = slices.Clone(st.Nodes)
	for i := range st.Nodes {
		st.Nodes[i].LastHeard, st.Nodes[i].Heard = nil, ""
	}
	st.Problems = slices.Clone(st.Problems)
	for i, p := range st.Problems {
		st.Problems[i] = goDuration.ReplaceAllString(p, "·")
	}
	b, err := json.Marshal(st)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(fmt.Appendf(b, "\n%d", recorded))
	return hex.EncodeToString(sum[:12])
}

// events is the page's stream: "change" when its page would show
// something else, "heard" with the nodes heard since (by name, how many
// milliseconds before the event), a comment when it has been quiet for
// keepAlive. The digest the page was made from (?digest=) is where it
// starts: a change between the page and its stream is sent.
func (p *Pages) events(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	if rc.Flush() != nil {
		return
	}
	f := p.hub.follow()
	defer p.hub.leave(f)
	shown := r.URL.Query().Get("digest")
	told := map[string]time.Time{}
	quiet := time.NewTicker(keepAlive)
	defer quiet.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-p.hub.done:
			return
		case <-quiet.C:
			fmt.Fprint(w, ":\n\n")
		case s := <-f.next:
			said := false
			if s.digest != shown {
				shown = s.digest
				fmt.Fprintf(w, "event: change\ndata: %s\n\n", s.digest)
				said = true
			}
			if ages := heardSince(s, told); len(ages) > 0 {
				b, _ := json.Marshal(ages)
				fmt.Fprintf(w, "event: heard\ndata: %s\n\n", b)
				said = true
			}
			if !said {
				continue
			}
			quiet.Reset(keepAlive)
		}
		if rc.Flush() != nil {
			return
		}
	}
}

// heardSince is, for each node s has heard a second or more past when
// told says the stream last told of it, how long before s it was heard,
// in milliseconds; told is brought up to date. The page shows ages to the
// second: a heartbeat's receipt and its write to the store, a moment
// apart, are one.
func heardSince(s *snapshot, told map[string]time.Time) map[string]int64 {
	ages := map[string]int64{}
	for node, at := range s.heard {
		if d := at.Sub(told[node]); d < time.Second && d > -time.Second {
			continue
		}
		told[node] = at
		ages[node] = max(s.at.Sub(at).Milliseconds(), 0)
	}
	return ages
}
