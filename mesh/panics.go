package mesh

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync/atomic"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// A panic never leaves a handler (docs/design.md): the controller runs in the
// process that embeds the bus, so one that escaped would take the bus down
// for the whole fleet. Every bus subscription, HTTP handler, push worker
// and background pass runs under catch.

// guard is what recovers the panics of the controller's handlers and
// loops: the count they add to, and the log that holds their stacks.
type guard struct {
	panics *atomic.Uint64
	log    *slog.Logger
}

// catch, deferred, recovers a panic in what: it logs the stack, counts it
// in mesh_panics_total, and hands answer (when given) an error for the
// caller. It must be the deferred function itself, so that recover works.
func (g guard) catch(what string, answer func(error)) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler { //nolint:errorlint // net/http's own sentinel, compared as it does
		panic(v)
	}
	g.panics.Add(1)
	g.log.Error("panic recovered; the process goes on", "in", what, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	if answer != nil {
		answer(fmt.Errorf("%s failed: the controller hit an internal error (its log holds the stack); nothing more was done", what))
	}
}

// guardMsg places who sent m and runs h under catch; a request that panics
// is answered with a failure in the API's reply envelope, under the
// requester's own inbox only, as every answer is.
func (c *Controller) guardMsg(what string, who func(*nats.Msg) requester, h func(*nats.Msg, requester)) nats.MsgHandler {
	return func(m *nats.Msg) {
		var r requester // not known until who returns: a panic in it is answered nowhere
		defer c.guard.catch(what, func(err error) {
			if m.Reply == "" {
				return
			}
			c.respond(m, r, spec.EncodeReply(nil, err))
		})
		r = who(m)
		h(m, r)
	}
}

// guardHTTP runs every HTTP handler under catch: a panic is a 500 with the
// reason, and counted, rather than net/http's silent dropped connection.
func (c *Controller) guardHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer c.guard.catch("http "+r.Method+" "+r.URL.Path, func(err error) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		})
		h.ServeHTTP(w, r)
	})
}
