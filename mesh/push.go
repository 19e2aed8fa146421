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
)

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
	if !req.DryRun {
		defer since(c.timings.push, time.Now())
	}
	byName, targets, err := c.pushTargets(ctx, req.Nodes)
	if err != nil {
		return spec.PushResult{}, err
	}
	g, err := c.composer.gather(ctx)
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
		if ref, rosterSent, rosterErr = c.rosters.sendRoster(ctx, g.roster); rosterErr != nil {
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
		ws[k] = c.watches.watch(it.node, res.ID, req.Progress, false)
	}
	// A row says a sequence only once its declaration was published: the
	// push's answer lists exactly the nodes that were sent one.
	which := resendFailed
	if req.Force {
		which = resendAll
	}
	results := c.sender.sendCaught(ctx, items, which)
	for k, r := range results {
		it, pn := items[k], &res.Nodes[listed[k]]
		switch {
		case r.err != nil:
			c.watches.unwatch(it.node, ws[k])
			pn.Error = r.err.Error()
			if store.IsBusy(r.err) {
				pn.Error = fmt.Sprintf("the store is busy (%v): nothing was sent to this node; run the push again once the store is free", r.err)
			}
			var caller callerError
			if !errors.As(r.err, &caller) {
				c.log.Error("declaration not sent", "node", it.node, "err", r.err)
			}
		case r.unchanged:
			c.watches.unwatch(it.node, ws[k])
			pn.Seq, pn.Unchanged = r.seq, true
		default:
			c.watches.setSeq(it.node, ws[k], r.seq)
			pn.Seq = r.seq
		}
	}
	return res, nil
}

// pushTargets is every node by name, and the nodes a push to named goes
// to (every node when none is named); a name no node has is the caller's
// mistake, and nothing is sent.
func (c *Controller) pushTargets(ctx context.Context, named []string) (map[string]store.Node, []string, error) {
	nodes, err := c.deps.DB.Nodes(ctx)
	if err != nil {
		return nil, nil, err
	}
	byName := map[string]store.Node{}
	var targets []string
	for _, n := range nodes {
		byName[n.Name] = n
		if len(named) == 0 {
			targets = append(targets, n.Name)
		}
	}
	for _, name := range named {
		if _, ok := byName[name]; !ok {
			return nil, nil, notFoundError(fmt.Sprintf("no node called %q: mesh node list shows the nodes; nothing was sent", name))
		}
		targets = append(targets, name)
	}
	return byName, targets, nil
}

// sendCaught is sendAll, with a panic answered as every node's failure
// that has no result yet.
func (s *sender) sendCaught(ctx context.Context, items []sendItem, which resend) (results []sendResult) {
	defer s.guard.catch("push", func(err error) {
		results = make([]sendResult, len(items))
		for k := range results {
			results[k].err = err
		}
	})
	return s.sendAll(ctx, items, which)
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
			defer c.guard.catch("preview to node "+it.node, func(err error) { pn.Seq, pn.Error = 0, err.Error() })
			w := c.watches.watch(it.node, res.ID, progress, true)
			seq, err := c.sender.preview(ctx, it.node, it.ct)
			if err != nil {
				c.watches.unwatch(it.node, w)
				pn.Error = err.Error()
				return
			}
			c.watches.setSeq(it.node, w, seq)
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
func (s *sender) preview(ctx context.Context, node string, ct content) (uint64, error) {
	decl, err := s.numbers.next(ctx, node, 10*time.Minute)
	if err != nil {
		return 0, err
	}
	decl.Mode, decl.Resources, decl.RosterRef, decl.CAChain = spec.ModePreview, ct.resources, ct.ref, ct.chain
	body, err := json.Marshal(decl)
	if err != nil {
		return 0, fmt.Errorf("encode preview of node %q: %w", node, err)
	}
	if err := s.nc().PublishMsg(signedMsg(spec.PreviewSubject(node), body, ed25519.Sign(s.signKey, body))); err != nil {
		return 0, fmt.Errorf("send preview to node %q: %w", node, err)
	}
	return decl.Seq, nil
}
