package mesh

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// The simulated hosts of a roll answer a declaration that carries a
// binary as a launcher would: by a heartbeat reporting its digest
// (upgrade), by one reporting a fallback of it (fallBack), or not at all
// (silent), on the real bus.
const (
	upgrade  = "upgrade"
	fallBack = "fall back"
	silent   = "silent"
)

// simHosts are the simulated hosts of a mesh, each with how it answers.
type simHosts struct {
	t   *testing.T
	c   *Controller
	db  *store.DB
	clk *clock
	old string // the digest every node runs before the roll

	mu     sync.Mutex
	behave map[string]string
	// stamped counts the heartbeats sent, and sent is the time of each
	// node's last: a heartbeat's time is the clock's plus its count in
	// nanoseconds, so the last a node sent is told from those before.
	stamped int64
	sent    map[string]time.Time
}

// newRollMesh is a controller whose own node is alpha, beside it beta and
// gamma, each reporting this machine's architecture (gamma as uname
// writes it), running old; and its roll loop's ticks.
func newRollMesh(t *testing.T, clk *clock) (*Controller, *store.DB, rollTicks) {
	t.Helper()
	ticks := newRollTicks(t)
	c, db := newControllerCfg(t, clk, nil, func(cfg *Config) { cfg.Node, cfg.RollTicks = "alpha", ticks })
	joinNode(t, c, "beta")
	joinNode(t, c, "gamma")
	ctx := context.Background()
	for node, arch := range map[string]string{"alpha": runtime.GOARCH, "beta": runtime.GOARCH, "gamma": unameOf(runtime.GOARCH)} {
		if err := db.RecordFacts(ctx, spec.Facts{Node: node, Arch: arch, OS: runtime.GOOS, Capabilities: []string{spec.CapBinaries}}, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return c, db, ticks
}

// unameOf is goarch as uname -m writes it.
func unameOf(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return goarch
}

// publishFake records a release of content for goarch, straight into the
// store: what a roll reads of it is its record and its blob.
func publishFake(t *testing.T, db *store.DB, clk *clock, content, goarch string) spec.Release {
	t.Helper()
	ctx := context.Background()
	b := []byte(content)
	if err := db.PutBlob(ctx, spec.ContentDigest(b), b, time.Now()); err != nil {
		t.Fatal(err)
	}
	r, err := db.PublishRelease(ctx, store.Release{Digest: hexDigest(b), GOOS: "linux", GOARCH: goarch, Go: "go1.26.8", Size: int64(len(b)), Published: clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return releaseOf(r)
}

// simulate runs the hosts of c's nodes until the test ends: each heartbeat
// reports old until the node's declaration carries a binary, and then as
// behave says.
func simulate(t *testing.T, c *Controller, db *store.DB, clk *clock, old string, behave map[string]string) *simHosts {
	h := &simHosts{t: t, c: c, db: db, clk: clk, old: old, behave: behave, sent: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			h.beat(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	poll.Until(t, 10*time.Second, "every simulated host to be heard", func() error {
		for node := range behave {
			if n, err := db.Node(context.Background(), node); err != nil || n.HostVersion != old {
				return errors.New(node)
			}
		}
		return nil
	})
	return h
}

// set changes how node answers from now on.
func (h *simHosts) set(node, behave string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.behave[node] = behave
}

// carried is the binary digest node's last declaration carries ("" none),
// as the store has it.
func (h *simHosts) carried(node string) string {
	h.t.Helper()
	d, err := h.db.LastDeclaration(context.Background(), node)
	if errors.Is(err, store.ErrNotFound) {
		return ""
	}
	if err != nil {
		h.t.Fatalf("node %s's last declaration: %v", node, err)
	}
	if b := binaryIn(h.t, d); b != nil {
		return b.Digest
	}
	return ""
}

// lastSent is the time of node's last heartbeat sent.
func (h *simHosts) lastSent(node string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent[node]
}

// setController has the hosts talk to c (a controller restarted).
func (h *simHosts) setController(c *Controller) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.c = c
}

func (h *simHosts) beat(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for node, behave := range h.behave {
		digest, retry := "", 0
		d, err := h.db.LastDeclaration(ctx, node)
		if err == nil {
			var decl spec.Declaration
			if err := spec.Decode(d.Body, &decl); err != nil {
				h.t.Errorf("node %s: %v", node, err)
				return
			}
			for _, r := range decl.Resources {
				if b, ok := spec.As[*spec.BinarySpec](r); ok {
					digest, retry = b.Digest, b.Retry
				}
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return // the store closing at the end
		}
		h.stamped++
		hb := spec.Heartbeat{Node: node, Time: h.clk.Now().Add(time.Duration(h.stamped)), HostVersion: h.old, Protocol: spec.Protocol, IntervalMS: 1000}
		switch {
		case digest == "":
		case behave == upgrade:
			hb.HostVersion = digest
		case behave == fallBack:
			// Under the retry count the declaration asks: a launcher tries
			// it again for a new count, and here fails again.
			hb.Fallbacks = []spec.Fallback{{Digest: digest, Reason: "exited at start: exit status 2", At: h.clk.Now(), Retry: retry}}
		case behave == silent:
			continue
		}
		if h.c.nc == nil || h.c.nc.IsClosed() {
			return
		}
		h.c.nc.Publish(spec.NodeSubject(node, spec.KindHeartbeat), mustJSON(h.t, hb))
		h.sent[node] = hb.Time
	}
}

// roll calls verb with req as the operator does.
func roll(t *testing.T, op *nats.Conn, verb string, req any) (spec.Roll, error) {
	t.Helper()
	var res spec.ReleaseRollResult
	err := callAPI(t, op, verb, req, &res)
	return res.Roll, err
}

// waitRoll waits until the latest roll is no longer running.
func waitRoll(t *testing.T, op *nats.Conn) spec.Roll {
	t.Helper()
	var r spec.Roll
	poll.Until(t, 20*time.Second, "the roll to finish or halt", func() error {
		var err error
		r, err = roll(t, op, spec.RollShow.Name, spec.ReleaseRollShowRequest{})
		if err == nil && r.Finished() {
			return nil
		}
		return errors.New(r.State)
	})
	return r
}

// rollTicks are the ticks of a test's roll loop (Config.RollTicks): a
// ticker's, every rollTick, so that a roll moves on as it does in a
// controller, and those looked sends.
type rollTicks chan time.Time

// newRollTicks runs the ticker of ticks until the test ends.
func newRollTicks(t *testing.T) rollTicks {
	ticks := make(rollTicks)
	ticker := time.NewTicker(rollTick)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-ticker.C:
				select {
				case ticks <- now:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; ticker.Stop() })
	return ticks
}

// looked returns once the roll loop has looked n times since the call,
// at each tick it took: it sends n+1 ticks, each taken only once the look
// before is done. With no roll running the loop takes a tick and looks at
// nothing.
func (ticks rollTicks) looked(t *testing.T, n int) {
	t.Helper()
	for range n + 1 {
		select {
		case ticks <- time.Now():
		case <-time.After(10 * time.Second):
			t.Fatal("the roll loop took no tick within 10 s")
		}
	}
}

// binaryIn is the binary d carries, nil if none.
func binaryIn(t *testing.T, d store.Declaration) *spec.BinarySpec {
	t.Helper()
	var decl spec.Declaration
	if err := spec.Decode(d.Body, &decl); err != nil {
		t.Fatal(err)
	}
	for _, r := range decl.Resources {
		if b, ok := spec.As[*spec.BinarySpec](r); ok {
			return b
		}
	}
	return nil
}

// states is each node of r with its state, in roll order.
func states(r spec.Roll) string {
	var out []string
	for _, n := range r.Nodes {
		out = append(out, n.Node+"="+n.State)
	}
	return strings.Join(out, " ")
}

// TestRollInOrder: a roll over the three nodes sends one at a time, each
// after the one before reported the digest, the controller's own node
// (alpha) last; each node's declarations carry the binary. Rolling the
// digest every node runs again: each is healthy at once and nothing is
// sent.
func TestRollInOrder(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, db, _ := newRollMesh(t, clk)
	op := operatorConn(t, c)
	old := hexDigest([]byte("v1"))
	rel := publishFake(t, db, clk, "mesh v2", runtime.GOARCH)
	hosts := simulate(t, c, db, clk, old, map[string]string{"alpha": upgrade, "beta": upgrade, "gamma": upgrade})

	started, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest})
	if err != nil {
		t.Fatal(err)
	}
	if got := states(started); got != "beta=pending gamma=pending alpha=pending" {
		t.Fatalf("the roll as started: %s, want the controller's node last", got)
	}
	r := waitRoll(t, op)
	if r.State != spec.RollDone || states(r) != "beta=healthy gamma=healthy alpha=healthy" {
		t.Fatalf("roll %s (%s): %s", r.State, r.Cause, states(r))
	}
	for i := 1; i < len(r.Nodes); i++ {
		if prev, n := r.Nodes[i-1], r.Nodes[i]; n.Started.Before(*prev.Ended) {
			t.Errorf("%s was sent at %s, before %s was healthy at %s", n.Node, n.Started, prev.Node, prev.Ended)
		}
	}
	seqs := map[string]uint64{}
	for _, n := range []string{"alpha", "beta", "gamma"} {
		if got := hosts.carried(n); got != rel.Digest {
			t.Errorf("%s's declaration carries binary %q, want %s", n, got, rel.Digest)
		}
		d, err := db.LastDeclaration(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		seqs[n] = d.Seq
	}

	// A push keeps the binary declared.
	var pushed spec.PushResult
	if err := callAPI(t, op, spec.Push.Name, spec.PushRequest{}, &pushed); err != nil {
		t.Fatal(err)
	}
	for _, pn := range pushed.Nodes {
		if !pn.Unchanged {
			t.Errorf("a push after the roll sent %s %+v, want nothing: its binary is still declared", pn.Node, pn)
		}
	}

	again, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest})
	if err != nil {
		t.Fatal(err)
	}
	r = waitRoll(t, op)
	if r.ID != again.ID || r.State != spec.RollDone || states(r) != "beta=healthy gamma=healthy alpha=healthy" {
		t.Fatalf("the second roll %s: %s", r.State, states(r))
	}
	for n, seq := range seqs {
		if d, _ := db.LastDeclaration(context.Background(), n); d.Seq != seq {
			t.Errorf("rolling what %s runs sent it declaration %d", n, d.Seq)
		}
	}

	st := statusOf(t, c)
	if vs := st.Versions[rel.Digest]; strings.Join(vs, ",") != "alpha,beta,gamma" || len(st.Versions) != 1 {
		t.Errorf("status versions %v, want the three on %s", st.Versions, rel.Digest)
	}
	if st.Roll == nil || st.Roll.State != spec.RollDone || nodeStatus(st, "beta").Binary != rel.Digest {
		t.Errorf("status roll %+v, beta's binary %q", st.Roll, nodeStatus(st, "beta").Binary)
	}
	if n := metric(t, c, regexp.QuoteMeta(`mesh_nodes_running{sha256="`+rel.Digest+`"}`)); n != 3 {
		t.Errorf("mesh_nodes_running of %s: %d, want 3", rel.Digest, n)
	}
}

// TestKeptFallbacks: a heartbeat's fallbacks are kept to spec.MaxFallbacks,
// the newest (first), each text clipped.
func TestKeptFallbacks(t *testing.T) {
	t.Parallel()
	var fbs []spec.Fallback
	for i := range 10 {
		fbs = append(fbs, spec.Fallback{Digest: strconv.Itoa(i) + strings.Repeat("d", 1000), Reason: strings.Repeat("r", 1000)})
	}
	kept := keptHeartbeat(spec.Heartbeat{Node: "a", Fallbacks: fbs})
	if len(kept.Fallbacks) != spec.MaxFallbacks || kept.Fallbacks[0].Digest[0] != '0' {
		t.Fatalf("kept %d fallbacks, the first %.3s", len(kept.Fallbacks), kept.Fallbacks[0].Digest)
	}
	for _, f := range kept.Fallbacks {
		if len(f.Digest) > spec.MaxFactText+8 || len(f.Reason) > spec.MaxFactText+8 {
			t.Errorf("a fallback kept at %d and %d bytes", len(f.Digest), len(f.Reason))
		}
	}
}

// TestRollHaltsAtFallback: the first node's launcher falls back from the
// release: the roll halts at it, naming it and the reason, and the later
// nodes are never sent the binary. Status says so. Resuming asks it to
// try the release again (its binary's retry count goes up each time), and
// it falls back again under that count; a new roll while it is halted is
// refused; abort ends it, after which resume and abort have
// nothing to act on.
func TestRollHaltsAtFallback(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, db, ticks := newRollMesh(t, clk)
	op := operatorConn(t, c)
	old := hexDigest([]byte("v1"))
	rel := publishFake(t, db, clk, "mesh v3", runtime.GOARCH)
	hosts := simulate(t, c, db, clk, old, map[string]string{"alpha": upgrade, "beta": fallBack, "gamma": upgrade})

	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest}); err != nil {
		t.Fatal(err)
	}
	r := waitRoll(t, op)
	if r.State != spec.RollHalted || states(r) != "beta=failed gamma=pending alpha=pending" {
		t.Fatalf("roll %s: %s", r.State, states(r))
	}
	want := "beta fell back from " + rel.Digest[:12] + ": exited at start: exit status 2"
	if r.Cause != want || r.Nodes[0].Cause != want {
		t.Errorf("cause %q (node %q), want %q", r.Cause, r.Nodes[0].Cause, want)
	}
	ticks.looked(t, 3) // a halted roll sends nothing more
	for _, n := range []string{"gamma", "alpha"} {
		if got := hosts.carried(n); got != "" {
			t.Errorf("%s was sent binary %s after the roll halted", n, got)
		}
	}

	st := statusOf(t, c)
	if st.Roll == nil || st.Roll.ID != r.ID || st.AllClear {
		t.Errorf("status shows roll %+v, all clear %v", st.Roll, st.AllClear)
	}
	if p := strings.Join(st.Problems, "\n"); !strings.Contains(p, "roll "+strconv.FormatInt(r.ID, 10)+" of "+rel.Digest[:12]+" halted at beta: "+want) {
		t.Errorf("problems do not name the halt:\n%s", p)
	}
	if fb := nodeStatus(st, "beta").Fallbacks; len(fb) != 1 || fb[0].Digest != rel.Digest {
		t.Errorf("beta's fallbacks in status: %+v", fb)
	}

	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest}); err == nil || !strings.Contains(err.Error(), "is halted: mesh release roll --resume or --abort it first") {
		t.Errorf("a roll while one is halted: %v", err)
	}
	// Resumed, beta is asked to try the release again (retry 1), falls
	// back again under that count, and the roll halts again at it.
	before, _ := db.LastDeclaration(context.Background(), "beta")
	if _, err := roll(t, op, spec.RollResume.Name, spec.ReleaseRollResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	r = waitRoll(t, op)
	if r.State != spec.RollHalted || r.Cause != want {
		t.Errorf("resumed: %s %q, want halted: %s", r.State, r.Cause, want)
	}
	sent, _ := db.LastDeclaration(context.Background(), "beta")
	if b := binaryIn(t, sent); sent.Seq <= before.Seq || b == nil || b.Digest != rel.Digest || b.Retry != 1 {
		t.Errorf("resume sent beta declaration %d (before %d) with binary %+v, want the release with retry 1", sent.Seq, before.Seq, b)
	}
	if fb := nodeStatus(statusOf(t, c), "beta").Fallbacks; len(fb) != 1 || fb[0].Retry != 1 {
		t.Errorf("beta's fallbacks after the retry: %+v, want one under retry 1", fb)
	}
	// Given up on again, it is asked once more at the next resume (a node
	// that failed otherwise is asked nothing: TestRollDeadline).
	if _, err := roll(t, op, spec.RollResume.Name, spec.ReleaseRollResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if r = waitRoll(t, op); r.State != spec.RollHalted {
		t.Errorf("resumed twice: %s %q", r.State, r.Cause)
	}
	if d, _ := db.LastDeclaration(context.Background(), "beta"); binaryIn(t, d) == nil || binaryIn(t, d).Retry != 2 {
		t.Errorf("the second resume sent beta %+v, want retry 2", binaryIn(t, d))
	}
	var aborted spec.ReleaseRollResult
	if err := callAPI(t, op, spec.RollAbort.Name, spec.ReleaseRollAbortRequest{}, &aborted); err != nil || aborted.Roll.State != spec.RollAborted || aborted.Roll.Ended == nil {
		t.Fatalf("abort: %+v %v", aborted, err)
	}
	// beta carried no binary before the roll: it carries none again.
	if rv := aborted.Reverted; len(rv) != 1 || rv[0].Node != "beta" || rv[0].Error != "" || rv[0].Seq == 0 || rv[0].Unchanged {
		t.Errorf("reverted %+v, want beta sent a declaration", rv)
	}
	poll.Until(t, 10*time.Second, "beta's declaration to carry no binary", func() error {
		if hosts.carried("beta") == "" {
			return nil
		}
		return errors.New(hosts.carried("beta"))
	})
	if p := strings.Join(statusOf(t, c).Problems, "\n"); strings.Contains(p, "gave up on") || strings.Contains(p, "pending") {
		t.Errorf("after the abort, status still says:\n%s", p)
	}
	for _, verb := range []string{spec.RollResume.Name, spec.RollAbort.Name} {
		if _, err := roll(t, op, verb, struct{}{}); err == nil || !strings.Contains(err.Error(), "no roll is halted or running") {
			t.Errorf("%s with no roll: %v", verb, err)
		}
	}
	if r := waitRoll(t, op); r.State != spec.RollAborted || states(r) != "beta=failed gamma=pending alpha=pending" {
		t.Errorf("after abort: %s %s", r.State, states(r))
	}
}

// TestRollDeadline: a node that does not report the digest within
// --healthy-within halts the roll, naming what it reports; once it does,
// resume goes on from it, sending it nothing new.
func TestRollDeadline(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, db, _ := newRollMesh(t, clk)
	op := operatorConn(t, c)
	old := hexDigest([]byte("v1"))
	rel := publishFake(t, db, clk, "mesh v4", runtime.GOARCH)
	hosts := simulate(t, c, db, clk, old, map[string]string{"alpha": upgrade, "beta": silent, "gamma": upgrade})

	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest, Nodes: []string{"alpha", "beta"}, HealthyWithinMS: 5000}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "beta to be sent the binary", func() error {
		if hosts.carried("beta") == rel.Digest {
			return nil
		}
		return errors.New(hosts.carried("beta"))
	})
	// beta's host reports that it could not take the binary.
	sentTo, _ := db.LastDeclaration(context.Background(), "beta")
	failed := spec.Report{Node: "beta", Time: clk.Now(), Seq: sentTo.Seq, Results: []spec.ResourceResult{{Name: "mesh:binary:binary", Kind: spec.KindBinary,
		Outcome: spec.Failed, Error: "fetch blob sha256:" + rel.Digest + " for binary: no space left on device"}}}
	if err := c.nc.Publish(spec.NodeSubject("beta", spec.KindReport), mustJSON(t, failed)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "beta's report to be kept", func() error {
		r, err := db.LastReport(context.Background(), "beta")
		if err != nil {
			return err
		}
		if r.Seq == sentTo.Seq {
			return nil
		}
		return fmt.Errorf("beta's last report is %d, want %d", r.Seq, sentTo.Seq)
	})
	clk.Add(6 * time.Second)
	r := waitRoll(t, op)
	if r.State != spec.RollHalted || states(r) != "beta=failed alpha=pending" {
		t.Fatalf("roll %s: %s", r.State, states(r))
	}
	if want := "beta did not report " + rel.Digest[:12] + " within 5s: it reports " + old[:12]; !strings.HasPrefix(r.Cause, want) {
		t.Errorf("cause %q, want it to begin %q", r.Cause, want)
	}
	if want := "; its host failed the binary: fetch blob sha256:" + rel.Digest + " for binary: no space left on device"; !strings.HasSuffix(r.Cause, want) {
		t.Errorf("cause %q, want it to end %q", r.Cause, want)
	}
	if hosts.carried("gamma") != "" {
		t.Error("gamma, not named, was sent the binary")
	}
	sent, _ := db.LastDeclaration(context.Background(), "beta")

	hosts.set("beta", upgrade)
	if _, err := roll(t, op, spec.RollResume.Name, spec.ReleaseRollResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	if r := waitRoll(t, op); r.State != spec.RollDone || states(r) != "beta=healthy alpha=healthy" {
		t.Fatalf("resumed: %s %s (%s)", r.State, states(r), r.Cause)
	}
	if d, _ := db.LastDeclaration(context.Background(), "beta"); d.Seq != sent.Seq {
		t.Errorf("resume sent beta declaration %d again, its %d carried the binary already", d.Seq, sent.Seq)
	}
}

// TestRollSkipsAnotherArch: an arm64 release is never declared on amd64
// nodes: each is skipped, saying why, and the roll is done; no declaration
// carries it.
func TestRollSkipsAnotherArch(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, db, ticks := newRollMesh(t, clk)
	op := operatorConn(t, c)
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	rel := publishFake(t, db, clk, "mesh v2 for "+other, other)
	// gamma's host predates the kind: it reports no binaries capability.
	if err := db.RecordFacts(context.Background(), spec.Facts{Node: "gamma", Arch: other, OS: runtime.GOOS}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	hosts := simulate(t, c, db, clk, hexDigest([]byte("v1")), map[string]string{"alpha": upgrade, "beta": upgrade, "gamma": upgrade})

	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest}); err != nil {
		t.Fatal(err)
	}
	r := waitRoll(t, op)
	if r.State != spec.RollDone || states(r) != "beta=skipped gamma=skipped alpha=skipped" {
		t.Fatalf("roll %s: %s", r.State, states(r))
	}
	for _, n := range r.Nodes {
		want := "arch " + other + " release, node is " + runtime.GOARCH
		if n.Node == "gamma" {
			want = `its host does not report the "binaries" capability: its host predates the binary kind: run a newer mesh on it by hand once`
		}
		if n.Cause != want {
			t.Errorf("%s skipped: %q, want %q", n.Node, n.Cause, want)
		}
	}
	ticks.looked(t, 3)
	for _, n := range []string{"alpha", "beta", "gamma"} {
		if got := hosts.carried(n); got != "" {
			t.Errorf("%s was declared the %s binary", n, other)
		}
	}
}

// TestRollRefusals: a digest not published, one that is not a digest, a
// node not in the mesh, named twice, a deadline out of bounds, and resume
// or abort with no roll: one clear error each, of the caller, and nothing
// recorded.
func TestRollRefusals(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, db, _ := newRollMesh(t, clk)
	op := operatorConn(t, c)
	rel := publishFake(t, db, clk, "mesh v2", runtime.GOARCH)
	for _, tc := range []struct {
		verb string
		req  any
		want string
	}{
		{spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: hexDigest([]byte("never"))}, "is not published (mesh release list shows what is"},
		{spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: "v2"}, `release digest "v2" is not a SHA-256`},
		{spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest, Nodes: []string{"beta", "zeta"}}, `no node called "zeta"`},
		{spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest, Nodes: []string{"beta", "beta"}}, `node "beta" is named twice`},
		{spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest, HealthyWithinMS: 10}, "--healthy-within 10ms is not between 1s and 24h0m0s"},
		{spec.RollResume.Name, spec.ReleaseRollResumeRequest{}, "no roll is halted or running: nothing to resume"},
		{spec.RollAbort.Name, spec.ReleaseRollAbortRequest{}, "no roll is halted or running: nothing to abort"},
		{spec.RollShow.Name, spec.ReleaseRollShowRequest{}, "no release was ever rolled"},
	} {
		_, err := roll(t, op, tc.verb, tc.req)
		var re *spec.ReplyError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &re) || !re.CalledWrongly() {
			t.Errorf("%s %+v: %v, want the caller's error %q", tc.verb, tc.req, err, tc.want)
		}
	}
	if _, err := db.RollByID(context.Background(), 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a roll was recorded: %v", err)
	}
}

// TestRollGoesOnAfterRestart: the controller restarts while a node is
// being rolled: the new one goes on from that node, sending it nothing
// new, and finishes the roll. A halted roll stays halted across a restart.
func TestRollGoesOnAfterRestart(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, db, ticks := newRollMesh(t, clk)
	op := operatorConn(t, c)
	old := hexDigest([]byte("v1"))
	rel := publishFake(t, db, clk, "mesh v5", runtime.GOARCH)
	hosts := simulate(t, c, db, clk, old, map[string]string{"alpha": upgrade, "beta": silent, "gamma": upgrade})

	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "beta to be sent the binary", func() error {
		if hosts.carried("beta") == rel.Digest {
			return nil
		}
		return errors.New(hosts.carried("beta"))
	})
	sent, _ := db.LastDeclaration(context.Background(), "beta")

	c = restartController(t, c)
	hosts.setController(c)
	op = operatorConn(t, c)
	if r, err := roll(t, op, spec.RollShow.Name, spec.ReleaseRollShowRequest{}); err != nil || states(r) != "beta=sending gamma=pending alpha=pending" {
		t.Fatalf("after the restart: %s %v", states(r), err)
	}
	hosts.set("beta", upgrade)
	r := waitRoll(t, op)
	if r.State != spec.RollDone || states(r) != "beta=healthy gamma=healthy alpha=healthy" {
		t.Fatalf("roll %s: %s (%s)", r.State, states(r), r.Cause)
	}
	if d, _ := db.LastDeclaration(context.Background(), "beta"); d.Seq != sent.Seq {
		t.Errorf("the restarted controller sent beta declaration %d, its %d carried the binary already", d.Seq, sent.Seq)
	}

	// Halted, restarted: still halted, nothing sent.
	v6 := publishFake(t, db, clk, "mesh v6", runtime.GOARCH)
	hosts.set("beta", fallBack)
	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: v6.Digest}); err != nil {
		t.Fatal(err)
	}
	if r := waitRoll(t, op); r.State != spec.RollHalted {
		t.Fatalf("v6 roll %s: %s", r.State, states(r))
	}
	c = restartController(t, c)
	hosts.setController(c)
	op = operatorConn(t, c)
	ticks.looked(t, 3)
	if r := waitRoll(t, op); r.State != spec.RollHalted || states(r) != "beta=failed gamma=pending alpha=pending" || hosts.carried("gamma") != rel.Digest {
		t.Errorf("a halted roll after a restart: %s %s; gamma carries %s", r.State, states(r), hosts.carried("gamma"))
	}
	// Aborted, beta carries v5 again, as before the v6 roll.
	var aborted spec.ReleaseRollResult
	if err := callAPI(t, op, spec.RollAbort.Name, spec.ReleaseRollAbortRequest{}, &aborted); err != nil || len(aborted.Reverted) != 1 {
		t.Fatalf("abort: %+v %v", aborted, err)
	}
	poll.Until(t, 10*time.Second, "beta's declaration to carry v5 again", func() error {
		if hosts.carried("beta") == rel.Digest {
			return nil
		}
		return errors.New(hosts.carried("beta"))
	})
}

// TestRollDeadlinePassedWhileDown: the deadline of the node being rolled
// passes while the controller is down (as it does when the node is the
// controller's own, restarting into the release). The restarted controller
// does not halt on what the node said before it started: it gives the node
// until it would be silent to be heard, and the node, heard on the digest,
// is healthy.
func TestRollDeadlinePassedWhileDown(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	c, db, ticks := newRollMesh(t, clk)
	op := operatorConn(t, c)
	old := hexDigest([]byte("v1"))
	rel := publishFake(t, db, clk, "mesh v7", runtime.GOARCH)
	hosts := simulate(t, c, db, clk, old, map[string]string{"alpha": upgrade, "beta": silent, "gamma": upgrade})
	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest, Nodes: []string{"beta"}}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "beta to be sent the binary", func() error {
		if hosts.carried("beta") == rel.Digest {
			return nil
		}
		return errors.New(hosts.carried("beta"))
	})
	stop, _ := controllerStops.Load(c)
	stop.(func())()
	clk.Add(2 * time.Minute) // past beta's 60 s while no controller runs
	again, err := New(c.cfg, c.log, c.deps)
	if err != nil {
		t.Fatal(err)
	}
	runController(t, context.Background(), again)
	hosts.setController(again)
	op = operatorConn(t, again)
	ticks.looked(t, 3) // a controller that judged at once would have halted
	if r, err := roll(t, op, spec.RollShow.Name, spec.ReleaseRollShowRequest{}); err != nil || r.State != spec.RollRunning {
		t.Fatalf("after the restart, beta not yet heard: %s %s (%s) %v, want running", r.State, states(r), r.Cause, err)
	}
	hosts.set("beta", upgrade)
	if r := waitRoll(t, op); r.State != spec.RollDone || states(r) != "beta=healthy" {
		t.Fatalf("roll %s: %s (%s)", r.State, states(r), r.Cause)
	}
}

// sendFailing is the real store whose RecordDeclarations fails for one
// node, the first fail times: a send the controller could not make, as if
// it had stopped between recording the step and sending.
type sendFailing struct {
	*store.DB
	node string
	mu   sync.Mutex
	fail int
}

func (s *sendFailing) RecordDeclarations(ctx context.Context, ds []store.Declaration) (map[string]error, error) {
	s.mu.Lock()
	var failing bool
	kept := ds[:0:0]
	for _, d := range ds {
		if d.Node == s.node && s.fail > 0 {
			s.fail--
			failing = true
			continue
		}
		kept = append(kept, d)
	}
	s.mu.Unlock()
	failed, err := s.DB.RecordDeclarations(ctx, kept)
	if err == nil && failing {
		failed[s.node] = errors.New("database is locked")
	}
	return failed, err
}

// beatsNoted is a store that notes the time of each node's last recorded
// heartbeat, as its host stamped it.
type beatsNoted struct {
	Store
	mu   sync.Mutex
	last map[string]time.Time
}

func (s *beatsNoted) RecordHeartbeats(ctx context.Context, hbs []spec.Heartbeat, at time.Time) (map[string]error, error) {
	failed, err := s.Store.RecordHeartbeats(ctx, hbs, at)
	if err != nil {
		return failed, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, hb := range hbs {
		if failed[hb.Node] == nil {
			s.last[hb.Node] = hb.Time
		}
	}
	return failed, nil
}

// lastRecorded is the time of node's last heartbeat recorded.
func (s *beatsNoted) lastRecorded(node string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[node]
}

// TestRollSendFailureIsRetried: a node whose step was recorded but whose
// declaration the controller failed to send is sent it again on the next
// look, and the roll goes on; a silent node whose last heartbeat named the
// digest is not healthy on it.
func TestRollSendFailureIsRetried(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	failing := &sendFailing{node: "beta", fail: 2}
	noted := &beatsNoted{Store: failing, last: map[string]time.Time{}}
	ticks := newRollTicks(t)
	c, db := newControllerCfg(t, clk, func(db *store.DB) Store { failing.DB = db; return noted }, func(cfg *Config) { cfg.Node, cfg.RollTicks = "alpha", ticks })
	joinNode(t, c, "beta")
	ctx := context.Background()
	for _, n := range []string{"alpha", "beta"} {
		if err := db.RecordFacts(ctx, spec.Facts{Node: n, Arch: runtime.GOARCH, OS: runtime.GOOS, Capabilities: []string{spec.CapBinaries}}, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	op := operatorConn(t, c)
	rel := publishFake(t, db, clk, "mesh v7", runtime.GOARCH)
	hosts := simulate(t, c, db, clk, hexDigest([]byte("v1")), map[string]string{"alpha": upgrade, "beta": upgrade})

	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest}); err != nil {
		t.Fatal(err)
	}
	if r := waitRoll(t, op); r.State != spec.RollDone || states(r) != "beta=healthy alpha=healthy" {
		t.Fatalf("roll %s: %s (%s)", r.State, states(r), r.Cause)
	}
	failing.mu.Lock()
	left := failing.fail
	failing.mu.Unlock()
	if left != 0 {
		t.Errorf("the failing send was tried %d times, want 2 failures and then a send", 2-left)
	}

	hosts.set("alpha", silent)
	// Every heartbeat alpha sent is written at the clock as it is: once
	// its last is recorded, none is held to be written after the clock
	// moves (the controller keeps only a node's latest).
	poll.Until(t, 10*time.Second, "alpha's last heartbeat recorded", func() error {
		if sent, got := hosts.lastSent("alpha"), noted.lastRecorded("alpha"); !got.Equal(sent) {
			return fmt.Errorf("alpha's last heartbeat sent is stamped %s, its last recorded %s", sent.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano))
		}
		return nil
	})
	clk.Add(10 * time.Second)
	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest, Nodes: []string{"alpha"}, HealthyWithinMS: 5000}); err != nil {
		t.Fatal(err)
	}
	ticks.looked(t, 3)
	if r, _ := roll(t, op, spec.RollShow.Name, spec.ReleaseRollShowRequest{}); states(r) != "alpha=sending" {
		t.Errorf("a silent node that last reported the digest: %s, want it waited for", states(r))
	}
	clk.Add(6 * time.Second)
	r := waitRoll(t, op)
	if want := "alpha did not report " + rel.Digest[:12] + " within 5s: it reports " + rel.Digest[:12] + ", last heard 16s ago"; r.State != spec.RollHalted || r.Cause != want {
		t.Errorf("roll %s %q, want halted: %q", r.State, r.Cause, want)
	}
}

// activeRollReads counts the roll loop's reads of the running roll.
type activeRollReads struct {
	*store.DB
	n atomic.Int64
}

func (s *activeRollReads) ActiveRoll(ctx context.Context) (store.Roll, error) {
	s.n.Add(1)
	return s.DB.ActiveRoll(ctx)
}

// TestNoRollNoReads: a controller with no roll running does not look at
// the store for one on every tick; it looks once at its start, then when a
// roll is started, which it carries to its end, and then no more.
func TestNoRollNoReads(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	reads := &activeRollReads{}
	ticks := newRollTicks(t)
	c, db := newControllerCfg(t, clk, func(db *store.DB) Store { reads.DB = db; return reads }, func(cfg *Config) { cfg.Node, cfg.RollTicks = "alpha", ticks })
	ctx := context.Background()
	if err := db.RecordFacts(ctx, spec.Facts{Node: "alpha", Arch: runtime.GOARCH, OS: runtime.GOOS, Capabilities: []string{spec.CapBinaries}}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	// The one look at its start comes before the loop takes a tick.
	ticks.looked(t, 4)
	if n := reads.n.Load(); n != 1 {
		t.Fatalf("the roll loop read the running roll %d times in its first 4 ticks with none running, want 1", n)
	}
	idle := func(when string) {
		t.Helper()
		before := reads.n.Load()
		ticks.looked(t, 4)
		if n := reads.n.Load() - before; n != 0 {
			t.Fatalf("%s: the roll loop read the running roll %d times in 4 ticks with none running, want 0", when, n)
		}
	}

	op := operatorConn(t, c)
	rel := publishFake(t, db, clk, "mesh v2", runtime.GOARCH)
	simulate(t, c, db, clk, hexDigest([]byte("v1")), map[string]string{"alpha": upgrade})
	if _, err := roll(t, op, spec.ReleaseRoll.Name, spec.ReleaseRollRequest{Digest: rel.Digest}); err != nil {
		t.Fatal(err)
	}
	if r := waitRoll(t, op); r.State != spec.RollDone {
		t.Fatalf("roll %s (%s): %s", r.State, r.Cause, states(r))
	}
	idle("after the roll was done")
}
