package mesh

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// A panic never leaves a handler (DESIGN.md): the controller runs in the
// process that embeds the bus, so one that escaped would take the bus down
// for the whole fleet. Every bus subscription, HTTP handler, push worker
// and background pass runs under catch.

// catch, deferred, recovers a panic in what: it logs the stack, counts it
// in mesh_panics_total, and hands answer (when given) an error for the
// caller. It must be the deferred function itself, so that recover works.
func (c *Controller) catch(what string, answer func(error)) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler { //nolint:errorlint // net/http's own sentinel, compared as it does
		panic(v)
	}
	c.cfg.Panics.Add(1)
	c.log.Error("panic recovered; the process goes on", "in", what, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	if answer != nil {
		answer(fmt.Errorf("%s failed: the controller hit an internal error (its log holds the stack); nothing more was done", what))
	}
}

// guardMsg runs h under catch; a request that panics is answered with a
// failure in the API's reply envelope.
func (c *Controller) guardMsg(what string, h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		defer c.catch(what, func(err error) {
			if m.Reply == "" {
				return
			}
			body, _ := json.Marshal(spec.Reply{Error: err.Error()})
			m.Respond(body)
		})
		h(m)
	}
}

// guardHTTP runs every HTTP handler under catch: a panic is a 500 with the
// reason, and counted, rather than net/http's silent dropped connection.
func (c *Controller) guardHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer c.catch("http "+r.Method+" "+r.URL.Path, func(err error) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		})
		h.ServeHTTP(w, r)
	})
}
