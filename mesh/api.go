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
		var req spec.NodeListRequest
		if err := decodeRequest(verb, data, &req); err != nil {
			return nil, err
		}
		nodes, err := c.deps.DB.Nodes(ctx)
		if err != nil {
			return nil, err
		}
		res := spec.NodeListResult{Nodes: []spec.Node{}}
		now := c.cfg.Now()
		for _, n := range nodes {
			v := nodeView(n, now)
			if err := c.addDelivery(ctx, &v); err != nil {
				return nil, err
			}
			res.Nodes = append(res.Nodes, v)
		}
		return res, nil
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
		v.LastReport = new(spec.Report)
		if err := json.Unmarshal(r.Body, v.LastReport); err != nil {
			return fmt.Errorf("read last report of node %q: %w", v.Name, err)
		}
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
		HostVersion:   n.HostVersion,
		Protocol:      n.Protocol,
		ProtocolKnown: n.Protocol == spec.Protocol,
		AppliedSeq:    n.AppliedSeq,
		Facts:         n.Facts,
	}
	if !n.LastHeard.IsZero() {
		t := n.LastHeard.UTC()
		v.LastHeard = &t
		v.HeardAgo = now.Sub(n.LastHeard).Round(time.Second).String()
	}
	return v
}
