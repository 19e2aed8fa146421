package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// TestWaitForReportsThroughAWait: a report that the declaration waits (for
// the roster it names) is said and waited through to the apply's; a node
// that only said it waits is named as waiting at the deadline, not as
// silent, and neither is taken for done.
func TestWaitForReportsThroughAWait(t *testing.T) {
	t.Parallel()
	waits := spec.Report{Node: "alpha", Seq: 4, Waiting: "it names roster 7, which this host has not got"}
	applied := spec.Report{Node: "alpha", Seq: 4, Results: []spec.ResourceResult{{Name: "motd:file:/etc/motd", Outcome: spec.Changed}}}
	for _, tc := range []struct {
		name    string
		reports []spec.Report
		ok      bool
		lines   []string
		silent  []string
	}{
		{"waits, then applies", []spec.Report{waits, applied}, true,
			[]string{"alpha: sent declaration 4 (1 resources)", "alpha: declaration 4 waits: it names roster 7, which this host has not got", "alpha: applied declaration 4: 0 created, 1 changed, 0 removed, 0 unchanged, 0 failed (0 writes)", "  ~ motd:file:/etc/motd"}, nil},
		{"waits past the deadline", []spec.Report{waits}, false,
			[]string{"alpha: sent declaration 4 (1 resources)", "alpha: declaration 4 waits: it names roster 7, which this host has not got", "still waiting after 200ms (mesh status says for what): alpha"}, []string{"alpha"}},
		{"says nothing", nil, false,
			[]string{"alpha: sent declaration 4 (1 resources)", "no answer within 200ms from: alpha"}, []string{"alpha"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			events := make(chan *nats.Msg, len(tc.reports))
			for _, r := range tc.reports {
				body, _ := json.Marshal(spec.PushEvent{PushID: "p1", Report: r})
				events <- &nats.Msg{Data: body}
			}
			var out bytes.Buffer
			res := spec.PushResult{ID: "p1", Nodes: []spec.PushNode{{Node: "alpha", Seq: 4, Resources: 1}}}
			o := waitForReports(context.Background(), &out, res, events, nil, 200*time.Millisecond, false, false)
			if got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); !slices.Equal(got, tc.lines) {
				t.Errorf("printed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.lines, "\n"))
			}
			if o.OK != tc.ok || !slices.Equal(o.Silent, append([]string{}, tc.silent...)) {
				t.Errorf("outcome ok %v silent %v, want %v %v", o.OK, o.Silent, tc.ok, tc.silent)
			}
			if tc.ok && (o.Nodes[0].Report == nil || o.Nodes[0].Report.Waiting != "" || !o.Nodes[0].Answered) {
				t.Errorf("the outcome holds report %+v, answered %v: want the apply's", o.Nodes[0].Report, o.Nodes[0].Answered)
			}
		})
	}
}

// TestRosterHeld: a push's roster is held by a node whose heartbeat names
// it or a later one; one heard within its silence rule that names an
// older one is waited for; one never heard or silent is named, not waited
// for.
func TestRosterHeld(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { at := now.Add(-d); return &at }
	nodes := []spec.Node{
		{Name: "alpha", RosterSeq: 5, LastHeard: ago(time.Second), SilentAfterMS: 3000},
		{Name: "beta", RosterSeq: 6, LastHeard: ago(time.Second), SilentAfterMS: 3000},
		{Name: "gamma", RosterSeq: 4, LastHeard: ago(time.Second), SilentAfterMS: 3000},
		{Name: "delta", RosterSeq: 4, LastHeard: ago(time.Minute), SilentAfterMS: 3000},
		{Name: "epsilon"},
	}
	got := rosterHeld(spec.PushRoster{Seq: 5, Nodes: 5}, nodes, now)
	if got.Held != 2 || !slices.Equal(got.NotYet, []string{"gamma"}) || !slices.Equal(got.Silent, []string{"delta", "epsilon"}) {
		t.Fatalf("held %d, not yet %v, silent %v; want 2, [gamma], [delta epsilon]", got.Held, got.NotYet, got.Silent)
	}
}

// TestPushSaysALostControllerAtOnce: a push whose controller's bus ends
// during the wait says so at once, with when and why, the nodes sent to
// and not heard from, those that answered, and what to run; it does not
// wait out --wait and blame the nodes.
func TestPushSaysALostControllerAtOnce(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("the bus did not start")
	}
	t.Cleanup(srv.Shutdown)
	lost := newLoss()
	nc, err := nats.Connect(srv.ClientURL(), append(lost.options(), nats.NoReconnect())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	events := make(chan *nats.Msg, 4)
	if _, err := nc.ChanSubscribe("progress", events); err != nil {
		t.Fatal(err)
	}
	res := spec.PushResult{ID: "p1", Nodes: []spec.PushNode{{Node: "alpha", Seq: 4, Resources: 1}, {Node: "beta", Seq: 6, Resources: 1}, {Node: "gamma", Seq: 2, Resources: 1}}}
	var (
		mu   sync.Mutex
		out  bytes.Buffer
		done = make(chan PushOutcome, 1)
	)
	start := time.Now()
	go func() {
		done <- waitForReports(context.Background(), lockedWriter{&mu, &out}, res, events, lost, time.Minute, false, false)
	}()
	if err := nc.Publish("progress", mustMarshal(t, spec.PushEvent{PushID: "p1", Report: spec.Report{Node: "alpha", Seq: 4}})); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "alpha's report printed", func() error {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(out.String(), "alpha: applied declaration 4") {
			return nil
		}
		return errors.New(out.String())
	})
	srv.Shutdown()
	var o PushOutcome
	poll.Until(t, 10*time.Second, "the wait ended by the bus's end", func() error {
		select {
		case o = <-done:
			return nil
		default:
			return errors.New("still waiting")
		}
	})
	mu.Lock()
	printed := out.String()
	mu.Unlock()
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the wait took %s", took)
	}
	for _, want := range []string{"lost the connection to the controller at ", "  sent before the loss, no report of its apply from: beta, gamma\n",
		"  answered before the loss: alpha\n", "mesh status says whether they applied it, and mesh push beta gamma sends it again if not\n"} {
		if !strings.Contains(printed, want) {
			t.Errorf("printed:\n%s\nwant a line holding %q", printed, want)
		}
	}
	if strings.Contains(printed, "no answer within") {
		t.Errorf("the nodes were blamed:\n%s", printed)
	}
	if o.OK || !strings.HasPrefix(o.Lost, "lost the connection to the controller at ") || !slices.Equal(o.Silent, []string{"beta", "gamma"}) {
		t.Errorf("outcome ok %v, lost %q, silent %v: want not ok, the loss, [beta gamma]", o.OK, o.Lost, o.Silent)
	}
}

// lockedWriter is a writer shared between a test and the function it
// runs.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
