package mesh

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// sseEvent is one event of a page's stream and when the test read it.
type sseEvent struct {
	name, data string
	at         time.Time
}

// liveStream is the controller's /events stream as a page holds it: every
// event read so far, with when it came.
type liveStream struct {
	mu     sync.Mutex
	events []sseEvent
	ended  error
}

// openLiveStream opens c's /events on its loopback listener, as the
// status page's script does, and reads it until the test ends.
func openLiveStream(t *testing.T, c *Controller) *liveStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+c.HTTPAddr()+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("/events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &liveStream{}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var name, data string
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "":
				if name != "" {
					s.mu.Lock()
					s.events = append(s.events, sseEvent{name: name, data: data, at: time.Now()})
					s.mu.Unlock()
				}
				name, data = "", ""
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			}
		}
		s.mu.Lock()
		s.ended = fmt.Errorf("the stream ended: %v", sc.Err())
		s.mu.Unlock()
	}()
	return s
}

// since are the events named name read after the first n events.
func (s *liveStream) since(n int, name string) ([]sseEvent, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sseEvent
	for _, e := range s.events[min(n, len(s.events)):] {
		if e.name == name {
			out = append(out, e)
		}
	}
	return out, s.ended
}

// mark is how many events have been read.
func (s *liveStream) mark() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events)
}

// changeWithinASecond publishes through publish and requires a "change"
// event on s within a second of it, measured from the publish.
func (s *liveStream) changeWithinASecond(t *testing.T, what string, publish func()) {
	t.Helper()
	from := s.mark()
	sent := time.Now()
	publish()
	poll.Until(t, time.Second-time.Since(sent), "a change event for "+what, func() error {
		got, ended := s.since(from, "change")
		if len(got) > 0 {
			return nil
		}
		if ended != nil {
			return ended
		}
		return fmt.Errorf("no change event in %s", time.Since(sent).Round(time.Millisecond))
	})
	got, _ := s.since(from, "change")
	took := got[0].at.Sub(sent)
	if took > time.Second {
		t.Fatalf("the change event for %s came %s after it was published", what, took)
	}
	t.Logf("change for %s after %s", what, took.Round(time.Millisecond))
}

// TestStatusStreamFollowsTheController: a page's stream on a real
// controller (bus, store, the status verb) says "change" within a second
// of a node's first heartbeat, of facts that change what the pages show,
// of a push and of the node's report being published; a quiet fleet,
// heartbeat after heartbeat, gets "heard" events and no "change".
func TestStatusStreamFollowsTheController(t *testing.T) {
	// Not parallel: the deadline is the page's, not a test's allowance.
	c, _ := newControllerCfg(t, &clock{now: time.Now()}, nil, func(cfg *Config) { cfg.Now = time.Now })
	s := openLiveStream(t, c)
	poll.Until(t, 10*time.Second, "the stream's first change event (no digest given)", func() error {
		got, ended := s.since(0, "change")
		if len(got) > 0 {
			return nil
		}
		if ended != nil {
			return ended
		}
		return fmt.Errorf("events %d", s.mark())
	})

	facts := spec.Facts{Node: "alpha", Arch: "amd64", OS: "linux", Kernel: "6.1.0-28-amd64", Cores: 4}
	publish := func(kind string, v any) {
		t.Helper()
		if err := c.nc.Publish(spec.NodeSubject("alpha", kind), mustJSON(t, v)); err != nil {
			t.Fatal(err)
		}
	}
	beat := func(applied uint64) {
		t.Helper()
		publish(spec.KindHeartbeat, spec.Heartbeat{Node: "alpha", Time: time.Now(), AppliedSeq: applied, HostVersion: "v1", Protocol: spec.Protocol, IntervalMS: 1000})
	}

	s.changeWithinASecond(t, "alpha's first heartbeat", func() { beat(0) })
	s.changeWithinASecond(t, "alpha's facts", func() { publish(spec.KindFacts, facts) })
	facts.Kernel, facts.Arch = "6.12.0-1-arm64", "arm64"
	s.changeWithinASecond(t, "alpha's facts changed", func() { publish(spec.KindFacts, facts) })

	// A quiet fleet: heartbeats that change nothing but when alpha was
	// heard, every second, as a host sends them.
	quiet := s.mark()
	host, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-host.Done():
				return
			case <-tick.C:
				beat(0)
			}
		}
	}()
	poll.Until(t, 15*time.Second, "three heard events from alpha's heartbeats", func() error {
		heard, ended := s.since(quiet, "heard")
		if len(heard) >= 3 {
			return nil
		}
		if ended != nil {
			return ended
		}
		return fmt.Errorf("%d heard events", len(heard))
	})
	stop()
	if changes, _ := s.since(quiet, "change"); len(changes) > 0 {
		t.Fatalf("a quiet fleet's heartbeats sent %d change event(s): %+v", len(changes), changes)
	}

	op := operatorConn(t, c)
	var seq uint64
	s.changeWithinASecond(t, "a push to alpha", func() {
		r := apiCall(t, op, spec.Push.Name, spec.PushRequest{Nodes: []string{"alpha"}, Progress: spec.OperatorInbox + ".p", Force: true})
		if r.Error != "" {
			t.Fatalf("push: %s", r.Error)
		}
		seq = nodeStatus(statusOf(t, c), "alpha").SentSeq
	})
	if seq == 0 {
		t.Fatal("the push sent alpha nothing")
	}
	s.changeWithinASecond(t, "alpha's report", func() {
		publish(spec.KindReport, spec.Report{Node: "alpha", Seq: seq, Digest: "sha256:x"})
	})
	if st := nodeStatus(statusOf(t, c), "alpha"); st.AppliedSeq != seq {
		t.Fatalf("alpha applied %d after its report, want %d", st.AppliedSeq, seq)
	}
}
