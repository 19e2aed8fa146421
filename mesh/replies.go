package mesh

import (
	"context"
	"errors"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// The controller answers a request with its own rights, so an answer sent
// where the requester asked would let a node publish, through the
// controller, where it may not itself: a node's blob request with the reply
// subject mesh.decl.A would put the controller's answer on node A's
// declaration subject. Every handler therefore answers only under the
// requester's own inbox, and drops anything else, unanswered and not acted
// on; the serving connection's bus user can publish only to inboxes, so a
// bug here is still denied by the bus.

// requester is who published a request, as the bus's permissions place it:
// a node by the subject it published under (only it may publish there), the
// operator by the API subject (only operators may publish there), a joining
// host by the token its request proves it holds.
type requester struct {
	kind string // byNode, byEnrolment or byOperator; empty when not known
	name string // the node, or the token's ID
}

const (
	byNode      = "node"
	byEnrolment = "enrolment"
	byOperator  = "operator"
)

// byNodeSubject is the node that published m, from its subject.
func byNodeSubject(m *nats.Msg) requester {
	node, _, ok := spec.NodeFromSubject(m.Subject)
	if !ok || spec.CheckName("node", node) != nil {
		return requester{}
	}
	return requester{kind: byNode, name: node}
}

func byOperatorSubject(*nats.Msg) requester { return requester{kind: byOperator} }

// inbox is the prefix, dot included, of the subjects that requester may be
// answered on; empty for a requester not known, which is answered nowhere.
func (r requester) inbox() string {
	switch r.kind {
	case byNode:
		return spec.NodeInbox(r.name) + "."
	case byEnrolment:
		return spec.EnrolInbox(r.name) + "."
	case byOperator:
		return spec.OperatorInbox + "."
	}
	return ""
}

// replyAllowed is the one rule: reply is a plain subject under the
// requester's own inbox.
func replyAllowed(r requester, reply string) bool {
	in := r.inbox()
	if in == "" || !strings.HasPrefix(reply, in) || len(reply) == len(in) {
		return false
	}
	for _, tok := range strings.Split(reply, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
			return false
		}
	}
	return true
}

// allowReply says whether m may be answered; a request that may not is
// counted in mesh_replies_refused_total and logged, and its handler drops it.
func (c *Controller) allowReply(m *nats.Msg, r requester) bool {
	if replyAllowed(r, m.Reply) {
		return true
	}
	c.metrics.repliesRefused.Add(1)
	who := r.kind
	if who == "" {
		who = "unknown"
	}
	if ok, held := c.dropLog.allow(who+"/"+r.name, c.cfg.Now()); ok {
		c.log.Warn("request dropped: its reply subject is not under the requester's own inbox",
			"requester", who, "node", r.name, "subject", m.Subject, "reply", m.Reply, "dropped_unlogged_before", held)
	}
	return false
}

// respond answers m with body, only under the requester's own inbox.
func (c *Controller) respond(m *nats.Msg, r requester, body []byte) {
	if !c.allowReply(m, r) {
		return
	}
	if err := m.Respond(body); err != nil {
		c.log.Warn("reply not sent", "requester", r.kind, "node", r.name, "subject", m.Subject, "err", err)
	}
}

// enrolRequester is the joining host that sent an enrolment request: the
// token it names, when the request is signed by that token's secret. A
// request that proves no token is from no one the controller can answer.
func (c *Controller) enrolRequester(ctx context.Context) func(*nats.Msg) requester {
	return func(m *nats.Msg) requester {
		var req spec.EnrolRequest
		if err := spec.Decode(m.Data, &req); err != nil {
			return requester{}
		}
		t, err := c.deps.DB.Token(ctx, req.TokenID)
		if err != nil {
			if !errors.Is(err, store.ErrNotFound) {
				c.log.Error("enrolment request not answered: its token could not be read", "token", req.TokenID, "err", err)
			}
			return requester{}
		}
		key, err := nkeys.FromPublicKey(t.EnrolNKey)
		if err != nil || key.Verify(req.ProofBytes(), req.Proof) != nil {
			return requester{}
		}
		return requester{kind: byEnrolment, name: t.ID}
	}
}
