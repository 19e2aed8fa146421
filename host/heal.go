package host

import (
	"context"
	"errors"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
)

// A resource can fail for a cause outside the node: the controller does
// not answer (a CSR, a blob), the bus is down, the container engine does
// not answer. Nothing delivers the declaration again when that cause goes,
// so the host applies the kept declaration again by itself: after a wait
// that starts at healFirst and doubles up to the reconcile interval, and
// at once when it is back on the bus or the engine answers again. The
// whole declaration is applied again, as a reconcile pass does: what
// depends on the resource that failed (a container mounting a
// certificate's directory) is applied with it, and what is in place is
// not written again. A pass with no failure
// from outside ends the retries. A failure of the declaration itself (a
// bad spec, a path something else holds) is not retried before the
// reconcile: applying it again changes nothing.

// errNoController is a request on the bus that no controller answered:
// none subscribes to it (the controller is away, or starting).
var errNoController = errors.New("no controller answers on the bus")

// healFirst is the first wait before a pass that failed from outside is
// tried again.
const healFirst = time.Second

// outside says whether err is a failure whose cause is outside the node:
// a request on the bus that had no answer in time or no controller to
// answer it, a controller that answered it failed to carry it out (its
// store busy or failing: spec.ReplyFailed), a bus connection down, a
// container engine that does not answer. A controller's refusal, or its
// word that the request is wrong, is not one: asking again is answered
// the same. Nor is a host's own stop (context.Canceled): the next start
// applies again.
func outside(err error) bool {
	var answered *spec.ReplyError
	switch {
	case err == nil:
		return false
	case errors.As(err, &answered):
		return answered.Kind == spec.ReplyFailed
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, errNoController), client.IsErrConnectionFailed(err):
		return true
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrNoServers):
		return true
	}
	return false
}

// healing is when the kept declaration is applied again after a pass that
// failed from outside. Read and written by the delivery loop only.
type healing struct {
	// most is the longest wait: the reconcile interval.
	most time.Duration
	// wait is the last wait drawn (zero: none since the last pass without
	// a failure from outside), and at when the next pass is due (zero:
	// none is).
	wait time.Duration
	at   time.Time
}

// passed takes what a pass came to: one that failed from outside has the
// next due after a wait twice the last (healFirst at first, the reconcile
// interval at most), returned for the caller to arm; any other ends the
// retries (zero).
func (h *healing) passed(failedOutside bool, now time.Time) time.Duration {
	if !failedOutside {
		h.wait, h.at = 0, time.Time{}
		return 0
	}
	h.wait = min(max(2*h.wait, healFirst), h.most)
	h.at = now.Add(h.wait)
	return h.wait
}

// due says whether a pass is due at now; when one is pending and not due
// yet, wait is how long until it is.
func (h *healing) due(now time.Time) (due bool, wait time.Duration) {
	if h.at.IsZero() {
		return false, 0
	}
	if wait := h.at.Sub(now); wait > 0 {
		return false, wait
	}
	return true, 0
}

// reconnected has a pending pass due at once, its waits starting again
// from healFirst: the host is back on the bus, or its engine answers
// again, and the cause may have gone.
func (h *healing) reconnected(now time.Time) {
	if !h.at.IsZero() {
		h.wait, h.at = 0, now
	}
}

// healDue applies the kept declaration again when a pass that failed from
// outside is due again (now: the host is back on the bus or its engine
// answers again, so at once);
// one pending and not due yet arms the retry.
func (a *Agent) healDue(ctx context.Context, nc *nats.Conn, now bool) {
	if now {
		a.healing.reconnected(time.Now())
	}
	due, wait := a.healing.due(time.Now())
	switch {
	case due && a.held != nil:
		a.log.Debug("the kept declaration is applied again: a resource failed for a cause outside this node")
		a.apply(ctx, nc, a.held, true)
	case due:
		a.healing.passed(false, time.Now())
	case wait > 0:
		a.arm(wait)
	}
}
