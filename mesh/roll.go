package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// A roll (mesh release roll) is kept in the store and carried out by the
// controller's roll loop, one node at a time: the CLI call only records
// it. Each step is a store write, so a controller that restarts goes on
// where it was, or stays halted.

// rollTick is how often the roll loop looks at the running roll, besides
// when a roll is started or resumed.
const rollTick = 250 * time.Millisecond

// roller carries out rolls: the operator's roll verbs and the roll loop,
// with the loop's state that is not in the store.
type roller struct {
	base
	node  string           // the controller's own node, rolled last
	ticks <-chan time.Time // nil: a ticker's, every rollTick
	// gather, rosterOnce, contentNow and send are how a roll composes and
	// sends a node its declaration, as a push does.
	gather     func(context.Context) (gathered, error)
	rosterOnce func(context.Context, gathered) func() (*spec.RosterRef, error)
	contentNow func(context.Context, store.Node, gathered, func() (*spec.RosterRef, error)) (content, error)
	send       func(context.Context, string, content, resend) (uint64, bool, error)

	kick chan struct{}
	// step is held by each step of the loop and by an abort or resume:
	// an abort never lands between a step's record and its send.
	step sync.Mutex
	mu   sync.Mutex
	// sent are the steps (roll, position) whose declaration this process
	// sent: a step found sending after a restart is sent again (unchanged,
	// and so nothing, if the send before the restart got through).
	sent map[[2]int64]bool
	// began is when the roll loop started in this process: what a node was
	// heard saying before is not its last word on a deadline. Written and
	// read by the roll loop alone.
	began time.Time
}

func newRoller(b base, node string, ticks <-chan time.Time) *roller {
	return &roller{base: b, node: node, ticks: ticks, kick: make(chan struct{}, 1), sent: map[[2]int64]bool{}}
}

// wake has the roll loop look now.
func (r *roller) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *roller) wasSent(roll int64, pos int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent[[2]int64{roll, int64(pos)}]
}

func (r *roller) markSent(roll int64, pos int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent[[2]int64{roll, int64(pos)}] = true
}

// startRoll records a roll of the release req names over the nodes it
// names (every node when none), the controller's own node last, and has
// the roll loop start it. A digest not published, a node that is not in
// the mesh, a deadline out of bounds or a roll running or halted already:
// refused, nothing recorded.
func (rl *roller) startRoll(ctx context.Context, req spec.ReleaseRollRequest) (spec.ReleaseRollResult, error) {
	if err := spec.CheckReleaseDigest(req.Digest); err != nil {
		return spec.ReleaseRollResult{}, callerError(err.Error() + "; nothing was rolled")
	}
	within := time.Duration(req.HealthyWithinMS) * time.Millisecond
	if within == 0 {
		within = spec.DefaultHealthyWithin
	}
	if within < time.Second || within > spec.MaxHealthyWithin {
		return spec.ReleaseRollResult{}, callerError(fmt.Sprintf("--healthy-within %s is not between 1s and %s; nothing was rolled", within, spec.MaxHealthyWithin))
	}
	rel, err := rl.db.Release(ctx, req.Digest)
	if errors.Is(err, store.ErrNotFound) {
		return spec.ReleaseRollResult{}, notFoundError(fmt.Sprintf("release %s is not published (mesh release list shows what is; mesh release publish FILE adds one); nothing was rolled", req.Digest))
	}
	if err != nil {
		return spec.ReleaseRollResult{}, err
	}
	nodes, err := rl.db.Nodes(ctx)
	if err != nil {
		return spec.ReleaseRollResult{}, err
	}
	order, err := rollOrder(nodes, req.Nodes, rl.node)
	if err != nil {
		return spec.ReleaseRollResult{}, err
	}
	roll := store.Roll{Digest: rel.Digest, HealthyWithin: within, Started: rl.now()}
	for _, n := range order {
		roll.Nodes = append(roll.Nodes, store.RollNode{Node: n})
	}
	r, err := rl.db.StartRoll(ctx, roll)
	if errors.Is(err, store.ErrRollActive) {
		return spec.ReleaseRollResult{}, callerError(fmt.Sprintf("roll %d of %s is %s: mesh release roll --resume or --abort it first; nothing was rolled", r.ID, short(r.Digest), r.State))
	}
	if err != nil {
		return spec.ReleaseRollResult{}, err
	}
	rl.log.Info("roll started", "roll", r.ID, "digest", r.Digest, "nodes", len(r.Nodes), "healthy_within", within)
	rl.wake()
	return spec.ReleaseRollResult{Roll: rollOf(r)}, nil
}

// rollOrder is the order a roll sends nodes: those named, as named, or
// every node in the mesh by name; the controller's own node (own) last.
func rollOrder(nodes []store.Node, named []string, own string) ([]string, error) {
	in := map[string]store.Node{}
	for _, n := range nodes {
		in[n.Name] = n
	}
	var order []string
	if len(named) == 0 {
		for _, n := range nodes {
			if n.Removing.IsZero() {
				order = append(order, n.Name)
			}
		}
		sort.Strings(order)
	}
	for _, name := range named {
		n, ok := in[name]
		switch {
		case !ok:
			return nil, notFoundError(fmt.Sprintf("no node called %q: mesh node list shows the nodes; nothing was rolled", name))
		case !n.Removing.IsZero():
			return nil, callerError(removingError(name))
		case slices.Contains(order, name):
			return nil, callerError(fmt.Sprintf("node %q is named twice in --nodes; nothing was rolled", name))
		}
		order = append(order, name)
	}
	if len(order) == 0 {
		return nil, callerError("the mesh has no node to roll to; nothing was rolled")
	}
	if i := slices.Index(order, own); i >= 0 && own != "" {
		order = append(append(order[:i:i], order[i+1:]...), own)
	}
	return order, nil
}

// resumeRoll runs the halted roll again from its failed node. A node whose
// launcher gave up on the release is asked to try it once more (its
// binary's retry count goes up: spec.BinarySpec.Retry), since it would not
// start it again otherwise; the cause may have been put right since.
func (rl *roller) resumeRoll(ctx context.Context, _ spec.ReleaseRollResumeRequest) (spec.ReleaseRollResult, error) {
	rl.step.Lock()
	defer rl.step.Unlock()
	retry, err := rl.gaveUp(ctx)
	if err != nil {
		return spec.ReleaseRollResult{}, err
	}
	r, err := rl.db.ResumeRoll(ctx, retry)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrRollActive) {
		return spec.ReleaseRollResult{}, callerError(rl.noRollTo(ctx, "resume"))
	}
	if err != nil {
		return spec.ReleaseRollResult{}, err
	}
	rl.log.Info("roll resumed", "roll", r.ID, "digest", r.Digest)
	rl.wake()
	return spec.ReleaseRollResult{Roll: rollOf(r)}, nil
}

// gaveUp names the failed nodes of the halted roll whose launchers gave up
// on its release (none when no roll is halted: ResumeRoll says so).
func (rl *roller) gaveUp(ctx context.Context) ([]string, error) {
	r, err := rl.db.ActiveRoll(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range r.Nodes {
		if n.State != spec.RollFailed {
			continue
		}
		node, err := rl.db.Node(ctx, n.Node)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		retry, err := rl.binaryRetry(ctx, n.Node, r.Digest)
		if err != nil {
			return nil, err
		}
		if _, ok := fellBack(node, r.Digest, retry); ok {
			out = append(out, n.Node)
		}
	}
	return out, nil
}

// abortRoll ends the running or halted roll: the nodes not yet sent are
// never sent. What the nodes sent already hold stays declared.
func (rl *roller) abortRoll(ctx context.Context, _ spec.ReleaseRollAbortRequest) (spec.ReleaseRollResult, error) {
	rl.step.Lock()
	defer rl.step.Unlock()
	r, reverted, err := rl.db.AbortRoll(ctx, rl.now())
	if errors.Is(err, store.ErrNotFound) {
		return spec.ReleaseRollResult{}, callerError(rl.noRollTo(ctx, "abort"))
	}
	if err != nil {
		return spec.ReleaseRollResult{}, err
	}
	rl.log.Info("roll aborted", "roll", r.ID, "digest", r.Digest, "reverted", len(reverted))
	return spec.ReleaseRollResult{Roll: rollOf(r), Reverted: rl.sendEach(ctx, reverted)}, nil
}

// sendEach composes the mesh once and sends each of nodes its declaration
// (nothing to one that holds it), saying per node what it came to: an
// abort's nodes, whose binary is what it was before the roll.
func (rl *roller) sendEach(ctx context.Context, nodes []string) []spec.PushNode {
	if len(nodes) == 0 {
		return nil
	}
	out := make([]spec.PushNode, len(nodes))
	g, gerr := rl.gather(ctx)
	roster := rl.rosterOnce(ctx, g)
	for i, node := range nodes {
		pn := spec.PushNode{Node: node}
		switch {
		case gerr != nil:
			pn.Error = fmt.Sprintf("compose the mesh: %v; nothing was sent (mesh push %s)", gerr, node)
		case g.own[node] != nil:
			pn.Error = g.own[node].Error() + "; nothing was sent to it"
		default:
			n, err := rl.db.Node(ctx, node)
			var ct content
			if err == nil {
				ct, err = rl.contentNow(ctx, n, g, roster)
			}
			if err == nil {
				pn.Resources = len(ct.resources)
				pn.Seq, pn.Unchanged, err = rl.send(ctx, node, ct, resendNone)
			}
			if err != nil {
				pn.Error = fmt.Sprintf("%v (mesh push %s sends it)", err, node)
			}
		}
		out[i] = pn
	}
	return out
}

// noRollTo says there is no roll to resume (or abort), and what there is.
func (rl *roller) noRollTo(ctx context.Context, what string) string {
	r, err := rl.db.ActiveRoll(ctx)
	if err == nil {
		return fmt.Sprintf("roll %d of %s is %s, not halted: nothing to %s; nothing changed", r.ID, short(r.Digest), r.State, what)
	}
	return fmt.Sprintf("no roll is halted or running: nothing to %s; nothing changed", what)
}

// showRoll is the roll numbered req.ID, the latest when 0.
func (rl *roller) showRoll(ctx context.Context, req spec.ReleaseRollShowRequest) (spec.ReleaseRollResult, error) {
	r, err := rl.db.RollByID(ctx, req.ID)
	if errors.Is(err, store.ErrNotFound) {
		if req.ID == 0 {
			return spec.ReleaseRollResult{}, notFoundError("no release was ever rolled (mesh release roll DIGEST)")
		}
		return spec.ReleaseRollResult{}, notFoundError(fmt.Sprintf("no roll %d", req.ID))
	}
	if err != nil {
		return spec.ReleaseRollResult{}, err
	}
	return spec.ReleaseRollResult{Roll: rollOf(r)}, nil
}

func rollOf(r store.Roll) spec.Roll {
	out := spec.Roll{ID: r.ID, Digest: r.Digest, HealthyWithinMS: r.HealthyWithin.Milliseconds(), State: r.State, Cause: r.Cause,
		Started: r.Started.UTC(), Ended: timePtr(r.Ended), Nodes: []spec.RollNode{}}
	for _, n := range r.Nodes {
		out.Nodes = append(out.Nodes, spec.RollNode{Node: n.Node, State: n.State, Cause: n.Cause, Started: timePtr(n.Started), Ended: timePtr(n.Ended)})
	}
	return out
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// short is a digest's first twelve digits, for messages.
func short(digest string) string { return digest[:min(12, len(digest))] }

// rollLoop carries out the running roll until ctx ends.
func (rl *roller) rollLoop(ctx context.Context) {
	rl.began = rl.now()
	ticks := rl.ticks
	if ticks == nil {
		tick := time.NewTicker(rollTick)
		defer tick.Stop()
		ticks = tick.C
	}
	running := rl.rollStep(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
			// With no roll running only a start or a resume has the loop
			// look: a controller with nothing to roll does not read the
			// store four times a second.
			if !running {
				continue
			}
		case <-rl.kick:
		}
		running = rl.rollStep(ctx)
	}
}

// rollStep moves the running roll on by what the store says now: the
// first node not done is sent its declaration, or checked for its
// heartbeat's digest, its fallbacks and its deadline. A roll with no node
// left is done. It says whether a roll may still be running: false only
// when the store said none is (a failed read or a panic is looked at again
// at the next tick).
func (rl *roller) rollStep(ctx context.Context) (running bool) {
	running = true
	defer rl.guard.catch("roll", nil)
	rl.step.Lock()
	defer rl.step.Unlock()
	r, err := rl.db.ActiveRoll(ctx)
	if errors.Is(err, store.ErrNotFound) || err == nil && r.State != spec.RollRunning {
		return false
	}
	if err != nil {
		rl.log.Error("roll not carried on", "err", err)
		return true
	}
	for _, n := range r.Nodes {
		var err error
		switch n.State {
		case spec.RollPending:
			err = rl.rollSend(ctx, r, n)
		case spec.RollSending:
			err = rl.rollWatch(ctx, r, n)
		default:
			continue
		}
		if err != nil {
			rl.log.Error("roll not carried on", "roll", r.ID, "node", n.Node, "err", err)
		}
		return true // one node at a time
	}
	if err := rl.db.FinishRoll(ctx, r.ID, rl.now()); err != nil {
		rl.log.Error("roll not recorded done", "roll", r.ID, "err", err)
		return true
	}
	rl.log.Info("roll done", "roll", r.ID, "digest", r.Digest, "nodes", len(r.Nodes))
	return false
}

// rollSend begins node n's step: a node gone or of another architecture
// is skipped, saying why; one that cannot be sent fails the roll;
// otherwise its declarations carry the release from now on, and it is
// sent one.
func (rl *roller) rollSend(ctx context.Context, r store.Roll, n store.RollNode) error {
	now := rl.now()
	skip := func(cause string) error {
		rl.log.Info("roll skipped a node", "roll", r.ID, "node", n.Node, "cause", cause)
		return rl.db.EndRollStep(ctx, r.ID, n.Position, spec.RollSkipped, cause, now)
	}
	node, err := rl.db.Node(ctx, n.Node)
	if errors.Is(err, store.ErrNotFound) {
		return skip("the node was removed")
	}
	if err != nil {
		return err
	}
	if !node.Removing.IsZero() {
		return skip("the node is being removed")
	}
	rel, err := rl.db.Release(ctx, r.Digest)
	if err != nil {
		return err
	}
	var arch, goos string
	var caps []string
	if node.Facts != nil {
		arch, goos, caps = node.Facts.Arch, node.Facts.OS, node.Facts.Capabilities
	}
	if why := spec.BinaryFits(releaseOf(rel), arch, goos, caps); why != "" {
		return skip(why)
	}
	if !node.Held.IsZero() {
		return rl.rollFail(ctx, r, n, fmt.Sprintf("%s is held%s: it was not sent the release (mesh node release %s, then mesh release roll --resume)",
			n.Node, reasonSuffix(node.HeldReason), n.Node))
	}
	retry, err := rl.binaryRetry(ctx, n.Node, r.Digest)
	if err != nil {
		return err
	}
	if fb, ok := fellBack(node, r.Digest, retry); ok {
		return rl.rollFail(ctx, r, n, fmt.Sprintf("%s's launcher gave up on %s before (%s): it will not start it again unless the roll is resumed", n.Node, short(r.Digest), fb.Reason))
	}
	if err := rl.db.BeginRollStep(ctx, r.ID, n.Position, now); err != nil {
		return err
	}
	rl.log.Info("roll sends a node the release", "roll", r.ID, "node", n.Node, "digest", r.Digest)
	return rl.rollDeliver(ctx, r, n)
}

// rollDeliver sends node n its declaration, which carries the release now
// (nothing when its last declaration holds it already), and then, if its
// heartbeats report the digest, it is healthy at once.
func (rl *roller) rollDeliver(ctx context.Context, r store.Roll, n store.RollNode) error {
	g, err := rl.gather(ctx)
	if err != nil {
		return fmt.Errorf("compose the mesh: %w", err)
	}
	if own := g.own[n.Node]; own != nil {
		return rl.rollFail(ctx, r, n, own.Error()+"; it was not sent the release")
	}
	node, err := rl.db.Node(ctx, n.Node)
	if err != nil {
		return err
	}
	ct, err := rl.contentNow(ctx, node, g, rl.rosterOnce(ctx, g))
	if err != nil {
		return err // the controller's: tried again next tick
	}
	if _, _, err := rl.send(ctx, n.Node, ct, resendNone); err != nil {
		var caller callerError
		if errors.As(err, &caller) {
			return rl.rollFail(ctx, r, n, err.Error())
		}
		return err // the controller's: tried again next tick
	}
	rl.markSent(r.ID, n.Position)
	return rl.rollWatch(ctx, r, n)
}

// rollWatch checks node n, sent the release: healthy once its heartbeats
// report the digest; failed, halting the roll, when they report a
// fallback of it or the deadline passes first.
func (rl *roller) rollWatch(ctx context.Context, r store.Roll, n store.RollNode) error {
	if !rl.wasSent(r.ID, n.Position) {
		// Sending when this process started: send again (nothing, if the
		// send before the restart got through).
		return rl.rollDeliver(ctx, r, n)
	}
	now := rl.now()
	node, err := rl.db.Node(ctx, n.Node)
	if errors.Is(err, store.ErrNotFound) {
		return rl.db.EndRollStep(ctx, r.ID, n.Position, spec.RollSkipped, "the node was removed", now)
	}
	if err != nil {
		return err
	}
	// Counted with the heartbeats not yet written: the batch is at most a
	// tenth of a second behind.
	retry, err := rl.binaryRetry(ctx, n.Node, r.Digest)
	if err != nil {
		return err
	}
	if fb, ok := fellBack(node, r.Digest, retry); ok {
		return rl.rollFail(ctx, r, n, fmt.Sprintf("%s fell back from %s: %s", n.Node, short(r.Digest), fb.Reason))
	}
	// A version heard is one the node runs now: a silent node's last word
	// is not.
	if node.HostVersion == r.Digest && !Silent(node.LastHeard, now, node.Heartbeat) {
		rl.log.Info("roll: node healthy on the release", "roll", r.ID, "node", n.Node, "digest", r.Digest)
		if err := rl.db.EndRollStep(ctx, r.ID, n.Position, spec.RollHealthy, "", now); err != nil {
			return err
		}
		rl.wake()
		return nil
	}
	started := n.Started
	if started.IsZero() {
		started = now
	}
	if now.Sub(started) > r.HealthyWithin {
		// Not heard since this controller started: its host may be
		// starting the release now (the controller's own is, when its
		// step restarted this process). It is given until it would be
		// silent, counted from the start, to say so.
		if began := rl.began; node.LastHeard.Before(began) && !Silent(began, now, node.Heartbeat) {
			return nil
		}
		runs := "it was never heard"
		if !node.LastHeard.IsZero() {
			runs = fmt.Sprintf("it reports %s, last heard %s ago", versionOr(node.HostVersion), now.Sub(node.LastHeard).Round(time.Second))
		}
		why, err := rl.binaryFailure(ctx, n.Node)
		if err != nil {
			return err
		}
		runs += why
		return rl.rollFail(ctx, r, n, fmt.Sprintf("%s did not report %s within %s: %s", n.Node, short(r.Digest), r.HealthyWithin, runs))
	}
	return nil
}

// binaryFailure is "; its host failed the binary: CAUSE" when node's last
// report says its binary resource failed, else "".
func (rl *roller) binaryFailure(ctx context.Context, node string) (string, error) {
	rep, err := rl.db.LastReport(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var r spec.Report
	if err := json.Unmarshal(rep.Body, &r); err != nil {
		return "", fmt.Errorf("read node %q's last report: %w", node, err)
	}
	name := spec.ResourceName(spec.BinaryModule, spec.KindBinary, spec.BinaryTarget)
	for _, res := range r.Results {
		if res.Name == name && res.Outcome == spec.Failed {
			return "; its host failed the binary: " + clipStatus(res.Error), nil
		}
	}
	return "", nil
}

// rollFail records node n failed with cause, halting the roll.
func (rl *roller) rollFail(ctx context.Context, r store.Roll, n store.RollNode, cause string) error {
	rl.log.Warn("roll halted", "roll", r.ID, "node", n.Node, "cause", cause)
	return rl.db.EndRollStep(ctx, r.ID, n.Position, spec.RollFailed, cause, rl.now())
}

// fellBack is the fallback node's heartbeat reports of digest, if any,
// under retry or a later count: one given up under a lower count came
// before a resumed roll asked for it again.
func fellBack(n store.Node, digest string, retry int) (spec.Fallback, bool) {
	for _, f := range n.Fallbacks {
		if f.Digest == digest && f.Retry >= retry {
			return f, true
		}
	}
	return spec.Fallback{}, false
}

// binaryRetry is how many times node was asked to try digest again (a
// resumed roll): 0 when its binary is another release or none.
func (rl *roller) binaryRetry(ctx context.Context, node, digest string) (int, error) {
	rel, err := rl.db.NodeBinary(ctx, node)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	case rel.Digest != digest:
		return 0, nil
	}
	return rel.Retry, nil
}

// versionOr is a version as a roll's cause names it.
func versionOr(v string) string {
	if v == "" {
		return "no version"
	}
	return short(v)
}

// rollProblem is what status says of roll r: running (which node), or
// halted (where and why); "" once it is done or aborted.
func rollProblem(r spec.Roll) string {
	healthy := 0
	for _, n := range r.Nodes {
		if n.State == spec.RollHealthy {
			healthy++
		}
	}
	switch r.State {
	case spec.RollRunning:
		for _, n := range r.Nodes {
			if n.State == spec.RollSending || n.State == spec.RollPending {
				return fmt.Sprintf("roll %d of %s is running: %d of %d nodes healthy, %s next or being sent (mesh release roll --show)",
					r.ID, short(r.Digest), healthy, len(r.Nodes), n.Node)
			}
		}
	case spec.RollHalted:
		for _, n := range r.Nodes {
			if n.State == spec.RollFailed {
				return fmt.Sprintf("roll %d of %s halted at %s: %s (mesh release roll --resume or --abort)", r.ID, short(r.Digest), n.Node, n.Cause)
			}
		}
		return fmt.Sprintf("roll %d of %s halted: %s", r.ID, short(r.Digest), r.Cause)
	}
	return ""
}
