package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// The controller's answers that are not its own failures say whose they
// are (spec.KindOf reads it; a reply carries it as its kind), and are not
// logged as failures. Any other error is the controller's failure.

// callerError: the call is wrong (a malformed request, a bad argument).
type callerError string

func (e callerError) Error() string   { return string(e) }
func (callerError) ReplyKind() string { return spec.ReplyCaller }

// notFoundError: the call names what the mesh does not hold (no node,
// module or token by that name).
type notFoundError string

func (e notFoundError) Error() string   { return string(e) }
func (notFoundError) ReplyKind() string { return spec.ReplyNotFound }

// refusedError: the call is well made and the mesh's state refuses it (a
// token already used, the controller's own node removed).
type refusedError string

func (e refusedError) Error() string   { return string(e) }
func (refusedError) ReplyKind() string { return spec.ReplyRefused }

// serveAPI answers an operator's call from its verb's row: the request
// decoded (unknown fields refused), the handler called, its result or
// error in the reply envelope with the error's kind, the reply bounded, the
// call audited as its row's redaction says. A call whose reply subject is
// not under the operator's inbox is dropped before anything is done or
// audited: no one asked for it who could hear the answer.
func (c *Controller) serveAPI(ctx context.Context, m *nats.Msg, r requester) {
	// Each controller of a cluster answers who leads on its own
	// (spec.ControllerRoleSubject): it is no verb of the leader's.
	if m.Subject == spec.ControllerRoleSubject {
		return
	}
	if !c.allowReply(m, r) {
		return
	}
	c.metrics.apiCalls.Add(1)
	verb := strings.TrimPrefix(m.Subject, spec.APIPrefix)
	result, err := c.safeCall(ctx, verb, m.Data)
	c.changes.kick()
	if row, known := c.verbs[verb]; !known || row.redact.args != nil {
		c.auditor.audit(ctx, verb, m.Data, result.outcome, err)
	}
	// A call the controller's own stop cut short is not answered: its
	// failure would be the stop's, not the call's, and a caller that hears
	// nothing asks again (a roll's follower, as the controller's own node
	// swaps to the release, once took "context canceled" for the answer).
	if err != nil && ctx.Err() != nil {
		c.log.Info("api call cut short by the controller's stop: not answered", "verb", verb, "err", err)
		return
	}
	if err != nil {
		c.metrics.apiErrors.Add(1)
		if spec.KindOf(err) == spec.ReplyFailed {
			c.log.Error("api call failed", "verb", verb, "err", err)
		}
	}
	c.respond(m, r, c.bounded(verb, spec.EncodeReply(result.body, err)))
}

// safeCall is answer under catch: a verb that panics is answered, and
// audited, as a failure.
func (c *Controller) safeCall(ctx context.Context, verb string, data []byte) (result answer, err error) {
	defer c.guard.catch("api "+verb, func(e error) { result, err = answer{}, e })
	return c.answer(ctx, verb, data)
}

// call carries out verb's request data and returns its encoded result.
func (c *Controller) call(ctx context.Context, verb string, data []byte) (json.RawMessage, error) {
	a, err := c.answer(ctx, verb, data)
	return a.body, err
}

// answer carries out verb's request data and returns its encoded result
// and outcome. A verb no row knows is the caller's mistake.
func (c *Controller) answer(ctx context.Context, verb string, data []byte) (answer, error) {
	row, ok := c.verbs[verb]
	if !ok {
		return answer{}, callerError(fmt.Sprintf("unknown verb %q: this controller speaks protocol %d", verb, spec.Protocol))
	}
	return row.call(ctx, data)
}

func (c *Controller) showNode(ctx context.Context, req spec.NodeShowRequest) (spec.NodeShowResult, error) {
	if err := spec.CheckName("node", req.Name); err != nil {
		return spec.NodeShowResult{}, callerError(err.Error())
	}
	n, err := c.deps.DB.Node(ctx, req.Name)
	if errors.Is(err, store.ErrNotFound) {
		return spec.NodeShowResult{}, notFoundError(fmt.Sprintf("no node called %q: mesh node list shows the nodes", req.Name))
	}
	if err != nil {
		return spec.NodeShowResult{}, err
	}
	v := c.nodeView(n, c.cfg.Now())
	if err := c.addDelivery(ctx, &v); err != nil {
		return spec.NodeShowResult{}, err
	}
	if err := c.overlays.addTo(ctx, n, &v); err != nil {
		return spec.NodeShowResult{}, err
	}
	return spec.NodeShowResult{Node: v}, nil
}

func (c *Controller) caRoots(context.Context, spec.CARootsRequest) (spec.CARootsResult, error) {
	return spec.CARootsResult{PEM: string(c.deps.CA.RootsPEM()), Pins: []string{c.deps.CA.Pin()}}, nil
}

// addDelivery adds what was last sent to the node and its last report. A
// read that fails is an error, never "nothing sent".
func (c *Controller) addDelivery(ctx context.Context, v *spec.Node) error {
	d, err := c.deps.DB.LastDeclaration(ctx, v.Name)
	switch {
	case err == nil:
		v.SentSeq = d.Seq
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	r, err := c.deps.DB.LastReport(ctx, v.Name)
	switch {
	case err == nil:
		var rep spec.Report
		if err := json.Unmarshal(r.Body, &rep); err != nil {
			return fmt.Errorf("read last report of node %q: %w", v.Name, err)
		}
		// Capped as on receipt: a store written before reports were
		// capped may hold a larger one.
		rep = keptReport(rep)
		v.LastReport = &rep
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	return nil
}

// nodeView is a stored node as the operator sees it, heard as status
// hears it (beats.lastHeard).
func (c *Controller) nodeView(n store.Node, now time.Time) spec.Node {
	n = c.beats.lastHeard(n)
	v := spec.Node{
		Name:          n.Name,
		Address:       n.Address,
		Joined:        n.Joined.UTC(),
		SealKey:       n.SealKey,
		HostVersion:   spec.Clip(n.HostVersion, spec.MaxFactText),
		Protocol:      n.Protocol,
		ProtocolKnown: n.Protocol == spec.Protocol,
		AppliedSeq:    n.AppliedSeq,
		RosterSeq:     n.RosterSeq,
		HeartbeatMS:   n.Heartbeat.Milliseconds(),
		SilentAfterMS: SilentAfter(n.Heartbeat).Milliseconds(),
	}
	if n.Facts != nil {
		f := keptFacts(*n.Facts) // as on receipt, whatever the store holds
		v.Facts = &f
	}
	if !n.LastHeard.IsZero() {
		t := n.LastHeard.UTC()
		v.LastHeard = &t
		v.HeardAgo = now.Sub(n.LastHeard).Round(time.Second).String()
	}
	return v
}

// listNodes lists the nodes after req.After, by name, as many as fit one
// reply; Next names where the next page starts. Every node's view is
// bounded (its report and facts are capped on receipt), so a page holds at
// least one node.
func (c *Controller) listNodes(ctx context.Context, req spec.NodeListRequest) (spec.NodeListResult, error) {
	nodes, err := c.deps.DB.Nodes(ctx)
	if err != nil {
		return spec.NodeListResult{}, err
	}
	res := spec.NodeListResult{Nodes: []spec.Node{}}
	now := c.cfg.Now()
	size := replyOverhead
	for _, n := range nodes {
		if n.Name <= req.After {
			continue
		}
		v := c.nodeView(n, now)
		if err := c.addDelivery(ctx, &v); err != nil {
			return spec.NodeListResult{}, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return spec.NodeListResult{}, fmt.Errorf("encode node %q: %w", n.Name, err)
		}
		if size += len(b) + 1; size > spec.MaxReply && len(res.Nodes) > 0 {
			res.Next = res.Nodes[len(res.Nodes)-1].Name
			break
		}
		res.Nodes = append(res.Nodes, v)
	}
	return res, nil
}

// replyOverhead is room for a reply's envelope and a page's fields.
const replyOverhead = 4 << 10

// storePage is how many rows a paged list reads from the store at a time.
const storePage = 500

// fillPage is one reply's page of a list the store keeps in id order:
// it reads rows after the cursor after, storePage at a time, turns each
// into its wire form, and stops before the page would pass spec.MaxReply,
// returning in next the cursor to ask again from (0 when the list ended).
// A page holds at least one row.
func fillPage[R, V any](after int64, read func(after int64, n int) ([]R, error), id func(R) int64, wire func(R) V) (page []V, next int64, err error) {
	page = []V{}
	size := replyOverhead
	for {
		rows, err := read(after, storePage)
		if err != nil {
			return nil, 0, err
		}
		for _, r := range rows {
			v := wire(r)
			b, err := json.Marshal(v)
			if err != nil {
				return nil, 0, fmt.Errorf("encode row %d: %w", id(r), err)
			}
			if size += len(b) + 1; size > spec.MaxReply && len(page) > 0 {
				return page, after, nil
			}
			page = append(page, v)
			after = id(r)
		}
		if len(rows) < storePage {
			return page, 0, nil
		}
	}
}

// bounded is a reply's body if it fits spec.MaxReply, and otherwise an
// error that says so: a reply past the bus's max_payload would not be
// sent at all, and its caller would wait out its timeout for nothing.
// Replies are built to fit (lists are paged, a node's texts are cut on
// receipt); this is the last guard.
func (c *Controller) bounded(verb string, body []byte) []byte {
	if len(body) <= spec.MaxReply {
		return body
	}
	c.metrics.apiErrors.Add(1)
	c.log.Error("api reply too large to send", "verb", verb, "bytes", len(body), "max", spec.MaxReply)
	return spec.EncodeReply(nil, fmt.Errorf("%s: the answer is %d bytes, more than the %d a reply may carry, so it was not sent; ask for less (mesh %s --help), and report this: the controller should have cut it to fit",
		verb, len(body), spec.MaxReply, strings.ReplaceAll(verb, ".", " ")))
}
