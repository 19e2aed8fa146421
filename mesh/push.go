package mesh

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// nodeLock is the lock a node's sequence is taken under.
func (c *Controller) nodeLock(node string) *sync.Mutex {
	c.locksMu.Lock()
	defer c.locksMu.Unlock()
	if c.locks == nil {
		c.locks = map[string]*sync.Mutex{}
	}
	l, ok := c.locks[node]
	if !ok {
		l = &sync.Mutex{}
		c.locks[node] = l
	}
	return l
}

// gathered is every node composed: the plans of those that compose, the
// node-own failures of those that do not, the mesh's roster and its CA
// chain (ComposeChain).
type gathered struct {
	plans  map[string]Plan
	own    map[string]error
	roster spec.Roster
	chain  string
}

// gather composes every node of the mesh and gathers the roster. A node
// whose own set does not compose (ErrNodeOwn) contributes the routes of the
// declaration it last received, which is what it still serves; any other
// failure is raised, naming the node and the read, and no roster is
// returned beside it (invariant 1).
func (c *Controller) gather(ctx context.Context) (gathered, error) {
	nodes, err := c.deps.DB.Nodes(ctx)
	if err != nil {
		return gathered{}, err
	}
	modules, err := c.modulesByName(ctx)
	if err != nil {
		return gathered{}, err
	}
	// Every node's assignments and binary in one read each, not two reads
	// a node.
	all, err := c.deps.DB.Assignments(ctx)
	if err != nil {
		return gathered{}, err
	}
	assigned := map[string][]store.Assignment{}
	for _, a := range all {
		assigned[a.Node] = append(assigned[a.Node], a)
	}
	binaries, err := c.deps.DB.NodeBinaries(ctx)
	if err != nil {
		return gathered{}, err
	}
	g := gathered{plans: map[string]Plan{}, own: map[string]error{}, roster: spec.Roster{Nodes: []spec.RosterNode{}, Routes: []spec.RosterRoute{}},
		chain: ComposeChain(c.deps.CA.Intermediate())}
	for _, n := range nodes {
		if !n.Removing.IsZero() {
			continue // leaving the mesh: in nobody's roster, sent nothing
		}
		g.roster.Nodes = append(g.roster.Nodes, spec.RosterNode{Name: n.Name, Address: n.Address})
		var bin *store.Release
		if b, ok := binaries[n.Name]; ok {
			bin = &b
		}
		plan, own, err := c.composeWith(ctx, n, modules, assigned[n.Name], bin)
		if err != nil {
			return gathered{}, err
		}
		if own != nil {
			g.own[n.Name] = own
		} else {
			g.plans[n.Name] = plan
		}
		g.roster.Routes = append(g.roster.Routes, plan.Routes...)
	}
	g.roster.Sort()
	return g, nil
}

// modulesByName is every registered module, by name.
func (c *Controller) modulesByName(ctx context.Context) (map[string]spec.Module, error) {
	mods, err := c.deps.DB.Modules(ctx)
	if err != nil {
		return nil, err
	}
	modules := map[string]spec.Module{}
	for _, m := range mods {
		modules[m.Module.Name] = m.Module
	}
	return modules, nil
}

// composeOne composes node n. A node whose own set does not compose
// (ErrNodeOwn) is returned as own, with a plan holding only the routes of
// the declaration it last received, which is what it still serves; any
// other failure is err, naming the node and the read.
func (c *Controller) composeOne(ctx context.Context, n store.Node, modules map[string]spec.Module) (plan Plan, own, err error) {
	as, err := c.deps.DB.AssignmentsOf(ctx, n.Name)
	if err != nil {
		return Plan{}, nil, fmt.Errorf("compose node %q: %w", n.Name, err)
	}
	var bin *store.Release
	switch rel, err := c.deps.DB.NodeBinary(ctx, n.Name); {
	case err == nil:
		bin = &rel
	case !errors.Is(err, store.ErrNotFound):
		return Plan{}, nil, fmt.Errorf("compose node %q: %w", n.Name, err)
	}
	return c.composeWith(ctx, n, modules, as, bin)
}

// composeWith is composeOne with n's assignments and binary (nil: none)
// read already.
func (c *Controller) composeWith(ctx context.Context, n store.Node, modules map[string]spec.Module, as []store.Assignment, bin *store.Release) (plan Plan, own, err error) {
	in := NodeInput{Node: n.Name, Address: n.Address}
	if n.Facts != nil {
		in.Capabilities, in.Arch, in.OS = n.Facts.Capabilities, n.Facts.Arch, n.Facts.OS
	}
	if bin != nil {
		r := releaseOf(*bin)
		in.Binary, in.BinaryRetry = &r, bin.Retry
	}
	for _, a := range as {
		in.Assigned = append(in.Assigned, Assigned{Module: a.Module, Settings: a.Settings})
	}
	plan, err = ComposeNode(in, modules)
	switch {
	case err == nil:
		return plan, nil, nil
	case errors.Is(err, ErrNodeOwn):
		routes, rerr := c.servedRoutes(ctx, n.Name)
		if rerr != nil {
			return Plan{}, nil, rerr
		}
		return Plan{Routes: routes}, err, nil
	default:
		return Plan{}, nil, fmt.Errorf("compose node %q: %w", n.Name, err)
	}
}

// servedRoutes are the routes node serves by the declaration it last
// received; none if it never received one.
func (c *Controller) servedRoutes(ctx context.Context, node string) ([]spec.RosterRoute, error) {
	body, err := c.deps.DB.LastReceived(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var d spec.Declaration
	if err := spec.Decode(body, &d); err != nil {
		return nil, fmt.Errorf("read the last declaration node %q received: %w", node, err)
	}
	if d.RosterRef == nil {
		return nil, nil
	}
	// What the node serves is what the roster in force says it serves (the
	// reference may be older: a roster change sends the node nothing when
	// its resources are as they were).
	r, err := c.deps.DB.LastRoster(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("read the roster node %q's last declaration names (%d): no roster is recorded", node, d.RosterRef.Seq)
	}
	if err != nil {
		return nil, err
	}
	roster, err := rosterOf(r)
	if err != nil {
		return nil, err
	}
	return roster.RoutesOf(node), nil
}

// next is node's next declaration, without its content (see numbered).
func (c *Controller) next(ctx context.Context, node string, ttl time.Duration) (spec.Declaration, error) {
	last, n, err := c.sendState(ctx, node)
	if err != nil {
		return spec.Declaration{}, err
	}
	return c.numbered(ctx, n, last.Seq, ttl)
}

// sendState is what sending node a declaration reads: its last declaration
// (the zero one when none was sent) and its row. A node removed, or being
// removed, is refused as the caller's mistake; a read that failed is an
// error, never "nothing was sent before".
func (c *Controller) sendState(ctx context.Context, node string) (store.Declaration, store.Node, error) {
	last, err := c.deps.DB.LastDeclaration(ctx, node)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.Declaration{}, store.Node{}, fmt.Errorf("read the last declaration of node %q: %w", node, err)
	}
	n, err := c.deps.DB.Node(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return store.Declaration{}, store.Node{}, callerError(fmt.Sprintf("node %q was removed: nothing was sent to it", node))
	}
	if err != nil {
		return store.Declaration{}, store.Node{}, err
	}
	if !n.Removing.IsZero() {
		return store.Declaration{}, store.Node{}, callerError(removingError(node))
	}
	return last, n, nil
}

// numbered is the next declaration to n, without its content: numbered
// max(last sent, last applied) + 1, so a restored store never wedges a host
// (an applied sequence far above the last sent is not believed: see
// believe), issued now and expiring after ttl.
func (c *Controller) numbered(ctx context.Context, n store.Node, last uint64, ttl time.Duration) (spec.Declaration, error) {
	m, err := c.deps.DB.Mesh(ctx)
	if err != nil {
		return spec.Declaration{}, err
	}
	now := c.cfg.Now().UTC()
	return spec.Declaration{Mesh: m.Name, Node: n.Name, Seq: max(last, believedApplied(n.AppliedSeq, last)) + 1,
		Issued: now, Expires: now.Add(ttl), Protocol: spec.Protocol}, nil
}

// content is what one node's declaration holds, without its sequence and
// times: its resources, the reference to the roster message it was
// composed with and the CA chain.
type content struct {
	resources []spec.Resource
	ref       *spec.RosterRef // nil: none sent yet, or a preview
	chain     string
}

// contentFor is what a declaration holds of resources and of the mesh's
// roster and chain (ref is the roster message in force; nil when none is
// sent, as for a preview).
func contentFor(resources []spec.Resource, g gathered, ref *spec.RosterRef) content {
	return content{resources: resources, ref: ref, chain: g.chain}
}

// contentOf is what decl holds.
func contentOf(decl spec.Declaration) content {
	return content{resources: decl.Resources, ref: decl.RosterRef, chain: decl.CAChain}
}

// digest is contentDigest of ct, with no roster. A reference to a roster
// message is left out: the roster travels apart, so a roster change alone
// sends a node nothing (its declaration would hold what it holds).
func (ct content) digest() string {
	return contentDigest(ct.resources, spec.Roster{}, ct.chain)
}

// pushParallel is how many nodes a push sends to at once.
const pushParallel = 16

// push composes and sends to each named node (every node when none is
// named), in parallel, and forwards each node's report to the caller's
// progress subject. A held node is sent nothing. A dry run sends each node a
// preview, which is never stored, acked or applied.
func (c *Controller) push(ctx context.Context, req spec.PushRequest) (spec.PushResult, error) {
	if req.Progress != "" && !strings.HasPrefix(req.Progress, spec.OperatorInbox+".") {
		return spec.PushResult{}, callerError(fmt.Sprintf("progress subject %q is not under %s", req.Progress, spec.OperatorInbox))
	}
	nodes, err := c.deps.DB.Nodes(ctx)
	if err != nil {
		return spec.PushResult{}, err
	}
	byName := map[string]store.Node{}
	var targets []string
	for _, n := range nodes {
		byName[n.Name] = n
		if len(req.Nodes) == 0 {
			targets = append(targets, n.Name)
		}
	}
	for _, name := range req.Nodes {
		if _, ok := byName[name]; !ok {
			return spec.PushResult{}, notFoundError(fmt.Sprintf("no node called %q: mesh node list shows the nodes; nothing was sent", name))
		}
		targets = append(targets, name)
	}
	g, err := c.gather(ctx)
	if err != nil {
		return spec.PushResult{}, fmt.Errorf("compose the mesh: %w; nothing was sent, every host keeps what it has", err)
	}
	// The roster first, once for the mesh: a declaration that names it
	// follows it on the stream. A dry run sends none. One that could not
	// be sent leaves every host the names it has: no node is sent
	// anything.
	var ref *spec.RosterRef
	var rosterSent bool
	var rosterErr error
	if !req.DryRun {
		if ref, rosterSent, rosterErr = c.sendRoster(ctx, g.roster); rosterErr != nil {
			c.log.Error("roster not sent", "err", rosterErr)
		}
	}
	res := spec.PushResult{ID: "p" + randomHex(5), Nodes: make([]spec.PushNode, len(targets))}
	if rosterSent {
		res.Roster = &spec.PushRoster{Seq: ref.Seq, Nodes: len(g.roster.Nodes)}
	}
	var items []sendItem
	var listed []int // the line of each item
	for i, node := range targets {
		pn := spec.PushNode{Node: node}
		n := byName[node]
		switch {
		case !n.Held.IsZero():
			pn.Held = true
			pn.Error = fmt.Sprintf("held since %s%s: nothing was sent (mesh node release %s)", n.Held.UTC().Format(time.RFC3339), reasonSuffix(n.HeldReason), node)
		case !n.Removing.IsZero():
			pn.Error = removingError(node)
		case g.own[node] != nil:
			pn.Error = g.own[node].Error() + "; nothing was sent to it"
		case rosterErr != nil:
			pn.Resources = len(g.plans[node].Resources)
			pn.Error = fmt.Sprintf("the roster was not sent (%v): nothing was sent to this node, which keeps the names it has; run the push again", rosterErr)
		default:
			pn.Resources = len(g.plans[node].Resources)
			items = append(items, sendItem{node: node, ct: contentFor(g.plans[node].Resources, g, ref)})
			listed = append(listed, i)
		}
		res.Nodes[i] = pn
	}
	if req.DryRun {
		c.previewAll(ctx, res, items, listed, req.Progress)
		return res, nil
	}
	// Watch before sending: a fast host may answer before the send returns.
	ws := make([]*watcher, len(items))
	for k, it := range items {
		ws[k] = c.watch(it.node, res.ID, req.Progress, false)
	}
	// A row says a sequence only once its declaration was published: the
	// push's answer lists exactly the nodes that were sent one.
	which := resendFailed
	if req.Force {
		which = resendAll
	}
	results := c.sendCaught(ctx, items, which)
	for k, r := range results {
		it, pn := items[k], &res.Nodes[listed[k]]
		switch {
		case r.err != nil:
			c.unwatch(it.node, ws[k])
			pn.Error = r.err.Error()
			if store.IsBusy(r.err) {
				pn.Error = fmt.Sprintf("the store is busy (%v): nothing was sent to this node; run the push again once the store is free", r.err)
			}
			var caller callerError
			if !errors.As(r.err, &caller) {
				c.log.Error("declaration not sent", "node", it.node, "err", r.err)
			}
		case r.unchanged:
			c.unwatch(it.node, ws[k])
			pn.Seq, pn.Unchanged = r.seq, true
		default:
			c.setSeq(it.node, ws[k], r.seq)
			pn.Seq = r.seq
		}
	}
	return res, nil
}

// sendCaught is sendAll, with a panic answered as every node's failure
// that has no result yet.
func (c *Controller) sendCaught(ctx context.Context, items []sendItem, which resend) (results []sendResult) {
	defer c.catch("push", func(err error) {
		results = make([]sendResult, len(items))
		for k := range results {
			results[k].err = err
		}
	})
	return c.sendAll(ctx, items, which)
}

// previewAll sends each item's node a preview, pushParallel at once, and
// forwards each node's answer to progress.
func (c *Controller) previewAll(ctx context.Context, res spec.PushResult, items []sendItem, listed []int, progress string) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, pushParallel)
	for k, it := range items {
		pn := &res.Nodes[listed[k]]
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			defer c.catch("preview to node "+it.node, func(err error) { pn.Seq, pn.Error = 0, err.Error() })
			w := c.watch(it.node, res.ID, progress, true)
			seq, err := c.preview(ctx, it.node, it.ct)
			if err != nil {
				c.unwatch(it.node, w)
				pn.Error = err.Error()
				return
			}
			c.setSeq(it.node, w, seq)
			pn.Seq = seq
		}()
	}
	wg.Wait()
}

// removingError says that node's removal began and did not finish.
func removingError(node string) string {
	return fmt.Sprintf("node %q is only partly removed: nothing was sent to it (mesh node remove %s finishes the removal)", node, node)
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

// preview signs a dry-run declaration for node and sends it to the node's
// preview subject. It is numbered as the next send would be, but nothing of
// it is stored: the host answers with what it would change.
func (c *Controller) preview(ctx context.Context, node string, ct content) (uint64, error) {
	decl, err := c.next(ctx, node, 10*time.Minute)
	if err != nil {
		return 0, err
	}
	decl.Mode, decl.Resources, decl.RosterRef, decl.CAChain = spec.ModePreview, ct.resources, ct.ref, ct.chain
	body, err := json.Marshal(decl)
	if err != nil {
		return 0, fmt.Errorf("encode preview of node %q: %w", node, err)
	}
	if err := c.nc.PublishMsg(signedMsg(spec.PreviewSubject(node), body, ed25519.Sign(c.cfg.SignKey, body))); err != nil {
		return 0, fmt.Errorf("send preview to node %q: %w", node, err)
	}
	return decl.Seq, nil
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

// onBlob serves a chunk of a blob that node's last declaration names, and
// nothing else.
func (c *Controller) onBlob(ctx context.Context, m *nats.Msg, who requester) {
	if !c.allowReply(m, who) {
		return
	}
	node := who.name
	reply := func(v any, err error) { c.respond(m, who, spec.EncodeReply(v, err)) }
	var req spec.BlobRequest
	if err := spec.Decode(m.Data, &req); err != nil {
		reply(nil, callerError(fmt.Sprintf("malformed blob request: %v", err)))
		return
	}
	if err := c.mayFetch(ctx, node, req.Digest); err != nil {
		reply(nil, err)
		return
	}
	data, size, err := c.deps.DB.BlobChunk(ctx, req.Digest, req.Offset, spec.BlobChunk)
	if err != nil {
		reply(nil, err)
		return
	}
	reply(spec.BlobChunkReply{Size: size, Data: data}, nil)
}

// resendIfExpired re-sends the last sent content to a host that has not
// applied it and whose copy expired: re-signed under a new sequence, never
// recomposed (that would push changes nobody pushed).
func (c *Controller) resendIfExpired(ctx context.Context, hb spec.Heartbeat) error {
	d, err := c.deps.DB.LastDeclaration(ctx, hb.Node)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	now := c.cfg.Now()
	if hb.AppliedSeq >= d.Seq || now.Before(d.Expires) {
		return nil
	}
	var decl spec.Declaration
	if err := spec.Decode(d.Body, &decl); err != nil {
		return fmt.Errorf("read last declaration of node %q: %w", hb.Node, err)
	}
	seq, _, err := c.send(ctx, hb.Node, contentOf(decl), resendAll)
	if err != nil {
		return err
	}
	c.log.Info("expired declaration re-sent", "node", hb.Node, "was", d.Seq, "seq", seq)
	return nil
}
