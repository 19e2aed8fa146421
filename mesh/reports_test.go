package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// reportSeam is the real store whose RecordReports says which nodes'
// reports it recorded, and fails a batch that holds a report of failNode.
type reportSeam struct {
	*store.DB
	mu       sync.Mutex
	recorded map[string]bool
	failNode string
	tried    chan string
}

func (s *reportSeam) RecordReports(ctx context.Context, rs []store.ReportRecord) (map[int]error, error) {
	s.mu.Lock()
	fail := s.failNode
	s.mu.Unlock()
	for _, r := range rs {
		select {
		case s.tried <- r.Node:
		default:
		}
		if r.Node == fail {
			return nil, fmt.Errorf("record %d reports: %w", len(rs), errUnreachable)
		}
	}
	failed, err := s.DB.RecordReports(ctx, rs)
	if err == nil {
		s.mu.Lock()
		for i, r := range rs {
			if failed[i] == nil {
				s.recorded[r.Node] = true
			}
		}
		s.mu.Unlock()
	}
	return failed, err
}

func (s *reportSeam) wasRecorded(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recorded[node]
}

// TestReportsAreRecordedBeforeForwarded: a burst of reports from every
// node of a push is recorded (in batches) and each is forwarded to the
// push only once it is recorded; a report of a node that is not there
// stops no other; a batch the store does not take is forwarded nowhere.
func TestReportsAreRecordedBeforeForwarded(t *testing.T) {
	t.Parallel()
	seam := &reportSeam{recorded: map[string]bool{}, tried: make(chan string, 1024)}
	c, db := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store { seam.DB = db; return seam })
	ctx := context.Background()
	nodes := []string{"alpha"}
	for i := 1; i < 40; i++ {
		name := fmt.Sprintf("n%02d", i)
		if err := db.AddNode(ctx, store.Node{Name: name, Address: "10.0.0.1", NKey: "U" + name, Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, name)
	}
	progress := spec.OperatorInbox + ".reports"
	events := make(chan *nats.Msg, 256)
	sub, err := c.nc.ChanSubscribe(progress, events)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// forwarded is the node of the next event, checked recorded before it
	// was forwarded.
	forwarded := func(within time.Duration) (string, bool) {
		t.Helper()
		select {
		case m := <-events:
			var ev spec.PushEvent
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				t.Fatal(err)
			}
			if !seam.wasRecorded(ev.Report.Node) {
				t.Errorf("%s's report was forwarded before it was recorded", ev.Report.Node)
			}
			return ev.Report.Node, true
		case <-time.After(within):
			return "", false
		}
	}
	push := func() map[string]uint64 {
		t.Helper()
		res, err := c.push(ctx, spec.PushRequest{Force: true, Progress: progress})
		if err != nil {
			t.Fatal(err)
		}
		seqs := map[string]uint64{}
		for _, pn := range res.Nodes {
			if pn.Seq == 0 {
				t.Fatalf("not sent: %+v", pn)
			}
			seqs[pn.Node] = pn.Seq
		}
		return seqs
	}
	report := func(node string, seq uint64) {
		t.Helper()
		if err := c.nc.Publish(spec.NodeSubject(node, spec.KindReport), mustJSON(t, spec.Report{Node: node, Seq: seq, Digest: "sha256:x"})); err != nil {
			t.Fatal(err)
		}
	}

	seqs := push()
	report("ghost", 1)
	for _, n := range nodes {
		report(n, seqs[n])
	}
	got := map[string]bool{}
	for range nodes {
		node, ok := forwarded(30 * time.Second)
		if !ok {
			t.Fatalf("%d of %d reports forwarded", len(got), len(nodes))
		}
		got[node] = true
	}
	for _, n := range nodes {
		if nd, err := db.Node(ctx, n); err != nil || nd.AppliedSeq != seqs[n] {
			t.Errorf("%s: applied %d, %v; want %d", n, nd.AppliedSeq, err, seqs[n])
		}
	}
	if _, err := db.LastReport(ctx, "ghost"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a report of a node that is not there: %v", err)
	}

	// A batch the store does not take: n01's report is not forwarded, n02's
	// (in a later batch) is.
	seqs = push()
	seam.mu.Lock()
	seam.failNode = "n01"
	seam.mu.Unlock()
	for len(seam.tried) > 0 {
		<-seam.tried
	}
	report("n01", seqs["n01"])
	for node := range seam.tried {
		if node == "n01" {
			break
		}
	}
	report("n02", seqs["n02"])
	// Forwards go out in the order their batches were written: one of
	// n01's would come first.
	if node, ok := forwarded(30 * time.Second); !ok || node != "n02" {
		t.Fatalf("forwarded %q (%v), want n02's report alone", node, ok)
	}
}

// TestWaitingReportWatchedThrough: a report that the declaration waits
// (for the roster it names) is forwarded to the push, and the push goes
// on watching: the apply's report that follows is forwarded too, or a
// push whose hosts each wait for its roster first hears no apply at all.
func TestWaitingReportWatchedThrough(t *testing.T) {
	t.Parallel()
	c, _ := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	progress := spec.OperatorInbox + ".waiting"
	events := make(chan *nats.Msg, 16)
	sub, err := c.nc.ChanSubscribe(progress, events)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	res, err := c.push(ctx, spec.PushRequest{Force: true, Progress: progress, Nodes: []string{"alpha"}})
	if err != nil || len(res.Nodes) != 1 || res.Nodes[0].Seq == 0 {
		t.Fatalf("push: %+v, %v", res, err)
	}
	seq := res.Nodes[0].Seq
	for _, r := range []spec.Report{
		{Node: "alpha", Seq: seq, Digest: "sha256:x", Waiting: "it names roster 7, which this host has not got"},
		{Node: "alpha", Seq: seq, Digest: "sha256:x"},
	} {
		if err := c.nc.Publish(spec.NodeSubject("alpha", spec.KindReport), mustJSON(t, r)); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-events:
			var ev spec.PushEvent
			if err := json.Unmarshal(m.Data, &ev); err != nil || ev.PushID != res.ID || ev.Report.Waiting != r.Waiting {
				t.Fatalf("forwarded %s (%v), want the report %+v", m.Data, err, r)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("the report %+v was not forwarded to the push", r)
		}
	}
}

// TestReportAnsweredOnceRecorded: a report is answered once
// the store holds it, under the node's own inbox, naming it; one the
// store did not take is not answered (its host sends it again), and one
// whose reply subject is another's inbox is recorded and answered nowhere.
func TestReportAnsweredOnceRecorded(t *testing.T) {
	t.Parallel()
	seam := &reportSeam{recorded: map[string]bool{}, tried: make(chan string, 64)}
	c, _ := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store { seam.DB = db; return seam })
	ackIn := spec.ReportAckSubject("alpha")
	acks := make(chan *nats.Msg, 8)
	sub, err := c.nc.ChanSubscribe(spec.NodeInbox("alpha")+".>", acks)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	send := func(reply string, r spec.Report) {
		t.Helper()
		if err := c.nc.PublishRequest(spec.NodeSubject("alpha", spec.KindReport), reply, mustJSON(t, r)); err != nil {
			t.Fatal(err)
		}
	}
	when := time.Now().UTC().Truncate(time.Microsecond)
	send(ackIn, spec.Report{Node: "alpha", Seq: 0, Time: when, Digest: "sha256:x"})
	select {
	case m := <-acks:
		var ack spec.ReportAck
		if err := spec.DecodeReply(m.Data, &ack); err != nil || m.Subject != ackIn || ack.Seq != 0 || !ack.Time.Equal(when) {
			t.Fatalf("answer %s on %s (%v), want one naming the report on %s", m.Data, m.Subject, err, ackIn)
		}
		if !seam.wasRecorded("alpha") {
			t.Fatal("the report was answered before it was recorded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the report was not answered")
	}

	seam.mu.Lock()
	seam.failNode = "alpha"
	seam.mu.Unlock()
	for len(seam.tried) > 0 {
		<-seam.tried
	}
	send(ackIn, spec.Report{Node: "alpha", Seq: 0, Time: when.Add(time.Second), Digest: "sha256:x"})
	for node := range seam.tried {
		if node == "alpha" {
			break
		}
	}
	seam.mu.Lock()
	seam.failNode = ""
	seam.mu.Unlock()
	// Another's inbox: recorded, answered nowhere; then one answered, which
	// comes after any answer the two before it would have had.
	send(spec.NodeInbox("beta")+".report", spec.Report{Node: "alpha", Seq: 0, Time: when.Add(2 * time.Second), Digest: "sha256:x"})
	send(ackIn, spec.Report{Node: "alpha", Seq: 0, Time: when.Add(3 * time.Second), Digest: "sha256:x"})
	select {
	case m := <-acks:
		var ack spec.ReportAck
		if err := spec.DecodeReply(m.Data, &ack); err != nil || !ack.Time.Equal(when.Add(3*time.Second)) {
			t.Fatalf("answer %s (%v), want only the last report's: the one the store did not take is not answered", m.Data, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the last report was not answered")
	}
}
