package host

import (
	"context"
	"encoding/base64"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// The stream republishes a host's declarations and the roster messages to
// its plain subscriptions, once each, as it stores them, and never again:
// when the host connects it asks for what it may have missed (catchUpNow),
// and what it could not take it does again by its own timer (retryNow).

// arm has retryNow run within d (or sooner, when it is armed sooner).
func (a *Agent) arm(d time.Duration) {
	at := time.Now().Add(d)
	if !a.retryAt.IsZero() && a.retryAt.Before(at) {
		return
	}
	a.retryAt = at
	a.retry.Reset(d)
}

// retryNow does again what is due: sends the last report again while the
// controller has not answered it, asks for the roster a delta announced,
// handles the declaration that waits for its roster again (it asks for
// the roster again), asks for the node's last declaration when one could
// not be kept, applies the kept declaration again when a pass that failed
// for a cause outside the node is due again (heal.go). What is not due
// yet arms the timer again.
func (a *Agent) retryNow(ctx context.Context, nc *nats.Conn) {
	a.retryAt = time.Time{}
	a.reports.resend(nc, false)
	a.askDueNow(ctx, nc)
	a.handleWaiting(ctx, nc)
	if a.refetch {
		a.refetch = false
		a.checkDeclaration(ctx, nc)
	}
	a.healDue(ctx, nc, false)
}

// catchUpNow asks for the roster in force and the node's last
// declaration, naming those held (answered "held" in a few bytes when they
// are the last): the roster first, which a declaration may name. A
// declaration that waited for a roster the check took is handled. A pass
// that failed for a cause outside the node is applied again at once. The
// last report, not answered yet, is sent again.
func (a *Agent) catchUpNow(ctx context.Context, nc *nats.Conn) {
	key, err := a.signKey()
	if err != nil {
		a.log.Error("rosters and declarations cannot be verified", "err", err)
		return
	}
	if a.checkRoster(ctx, nc, key) {
		a.handleWaiting(ctx, nc)
	}
	a.checkDeclaration(ctx, nc)
	a.healDue(ctx, nc, true)
	a.reports.resend(nc, true)
}

// checkDeclaration asks the controller for the node's last declaration,
// naming the digest of the one held, and handles the answer as a delivery
// (the same refusals; one held already is a duplicate). None sent yet is
// no error.
func (a *Agent) checkDeclaration(ctx context.Context, nc *nats.Conn) {
	var req spec.DeclarationRequest
	if a.held != nil {
		req.Have = a.held.digest
	}
	var reply spec.DeclarationReply
	asking, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := request(asking, nc, spec.NodeSubject(a.state.Node, spec.KindDeclaration), req, &reply)
	cancel()
	switch {
	case spec.KindOf(err) == spec.ReplyNotFound:
		return
	case err != nil:
		a.log.Warn("the node's last declaration was asked for and not received; a declaration published from now on is delivered", "err", err)
		return
	case reply.Held:
		return
	}
	m := nats.NewMsg(spec.DeclarationDelivery(a.state.Node))
	m.Data = reply.Body
	m.Header.Set(spec.SigHeader, base64.StdEncoding.EncodeToString(reply.Sig))
	a.handleBatch(ctx, nc, []*nats.Msg{m})
}

// handleWaiting handles the declaration that waits for its roster (if one
// does) again: after a roster was taken, or when its retry is due.
func (a *Agent) handleWaiting(ctx context.Context, nc *nats.Conn) {
	if w := a.waiting; w != nil {
		a.waiting = nil
		a.handleBatch(ctx, nc, []*nats.Msg{w})
	}
}
