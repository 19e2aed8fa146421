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

// errBadRequest marks an error that is the caller's: it is answered, and
// not logged as the controller's failure.
var errBadRequest = errors.New("bad request")

// callerError is an answer about what the caller asked for (no such node):
// the message alone, marked as the caller's.
type callerError string

func (e callerError) Error() string        { return string(e) }
func (e callerError) Is(target error) bool { return target == errBadRequest }

// serveAPI answers an operator's call. A call whose reply subject is not
// under the operator's inbox is dropped before anything is done or audited:
// no one asked for it who could hear the answer.
func (c *Controller) serveAPI(ctx context.Context, m *nats.Msg, r requester) {
	if !c.allowReply(m, r) {
		return
	}
	c.metrics.apiCalls.Add(1)
	verb := strings.TrimPrefix(m.Subject, spec.APIPrefix)
	result, err := c.safeCall(ctx, verb, m.Data)
	// Every call is audited but a blob upload's chunks: the registration
	// they belong to is.
	if verb != spec.VerbBlobPut {
		c.audit(ctx, verb, m.Data, err)
	}
	var reply spec.Reply
	if err != nil {
		c.metrics.apiErrors.Add(1)
		reply.Error = err.Error()
		if !errors.Is(err, errBadRequest) {
			c.log.Error("api call failed", "verb", verb, "err", err)
		}
	} else if reply.Result, err = json.Marshal(result); err != nil {
		reply = spec.Reply{Error: fmt.Sprintf("encode %s result: %v", verb, err)}
	}
	body, _ := json.Marshal(reply)
	body = c.bounded(verb, body)
	c.respond(m, r, body)
}

// safeCall is call under catch: a verb that panics is answered, and audited,
// as a failure.
func (c *Controller) safeCall(ctx context.Context, verb string, data []byte) (result any, err error) {
	defer c.catch("api "+verb, func(e error) { result, err = nil, e })
	return c.call(ctx, verb, data)
}

func decodeRequest(verb string, data []byte, v any) error {
	if err := spec.Decode(data, v); err != nil {
		return callerError(fmt.Sprintf("%s: malformed request: %v", verb, err))
	}
	return nil
}

func (c *Controller) call(ctx context.Context, verb string, data []byte) (any, error) {
	switch verb {
	case spec.VerbNodeList:
		return handle(ctx, verb, data, c.listNodes)
	case spec.VerbNodeShow:
		var req spec.NodeShowRequest
		if err := decodeRequest(verb, data, &req); err != nil {
			return nil, err
		}
		if err := spec.CheckName("node", req.Name); err != nil {
			return nil, callerError(err.Error())
		}
		n, err := c.deps.DB.Node(ctx, req.Name)
		if errors.Is(err, store.ErrNotFound) {
			return nil, callerError(fmt.Sprintf("no node called %q: mesh node list shows the nodes", req.Name))
		}
		if err != nil {
			return nil, err
		}
		v := nodeView(n, c.cfg.Now())
		if err := c.addDelivery(ctx, &v); err != nil {
			return nil, err
		}
		return spec.NodeShowResult{Node: v}, nil
	case spec.VerbNodeRemove:
		return handle(ctx, verb, data, c.removeNode)
	case spec.VerbTokenCreate:
		return handle(ctx, verb, data, c.createToken)
	case spec.VerbTokenList:
		return handle(ctx, verb, data, c.listTokens)
	case spec.VerbTokenRevoke:
		return handle(ctx, verb, data, c.revokeToken)
	case spec.VerbModuleRegister:
		return handle(ctx, verb, data, c.registerModules)
	case spec.VerbModuleList:
		return handle(ctx, verb, data, c.listModules)
	case spec.VerbModuleShow:
		return handle(ctx, verb, data, c.showModule)
	case spec.VerbAssign:
		return handle(ctx, verb, data, c.assign)
	case spec.VerbUnassign:
		return handle(ctx, verb, data, c.unassign)
	case spec.VerbBlobPut:
		return handle(ctx, verb, data, c.putBlob)
	case spec.VerbPush:
		return handle(ctx, verb, data, c.push)
	case spec.VerbHold:
		return handle(ctx, verb, data, c.hold)
	case spec.VerbStatus:
		return handle(ctx, verb, data, c.status)
	case spec.VerbAudit:
		return handle(ctx, verb, data, c.auditLog)
	case spec.VerbCARoots:
		return handle(ctx, verb, data, func(context.Context, spec.CARootsRequest) (spec.CARootsResult, error) {
			return spec.CARootsResult{PEM: string(c.deps.CA.RootsPEM()), Pins: []string{c.deps.CA.Pin()}}, nil
		})
	default:
		return nil, callerError(fmt.Sprintf("unknown verb %q: this controller speaks protocol %d", verb, spec.Protocol))
	}
}

// handle decodes a request of type Req and calls fn with it.
func handle[Req, Res any](ctx context.Context, verb string, data []byte, fn func(context.Context, Req) (Res, error)) (any, error) {
	var req Req
	if err := decodeRequest(verb, data, &req); err != nil {
		return nil, err
	}
	return fn(ctx, req)
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

// nodeView is a stored node as the operator sees it.
func nodeView(n store.Node, now time.Time) spec.Node {
	v := spec.Node{
		Name:          n.Name,
		Address:       n.Address,
		Joined:        n.Joined.UTC(),
		HostVersion:   spec.Clip(n.HostVersion, spec.MaxFactText),
		Protocol:      n.Protocol,
		ProtocolKnown: n.Protocol == spec.Protocol,
		AppliedSeq:    n.AppliedSeq,
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
		v := nodeView(n, now)
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
	b, _ := json.Marshal(spec.Reply{Error: fmt.Sprintf("%s: the answer is %d bytes, more than the %d a reply may carry, so it was not sent; ask for less (mesh %s --help), and report this: the controller should have cut it to fit",
		verb, len(body), spec.MaxReply, strings.ReplaceAll(verb, ".", " "))})
	return b
}
