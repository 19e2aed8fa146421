package host

import (
	"fmt"
	"runtime/debug"
)

// A panic never leaves a handler (docs/design.md). On a controller's machine the
// host runs in the process that embeds the bus, so a panic that escaped
// would take the bus down with it; on any machine it would stop the
// heartbeats, the reconcile and the resolver. Each pass of the agent's loop
// runs under catch, and each resource's apply, plan and removal under
// Engine.recovered, so that one resource's panic is that resource's failure.

// catch, deferred, recovers a panic in what: it logs the stack and counts
// it. It must be the deferred function itself, so that recover works.
func (a *Agent) catch(what string) {
	if v := recover(); v != nil {
		a.panicked(what, v, debug.Stack())
	}
}

func (a *Agent) panicked(what string, v any, stack []byte) {
	a.cfg.Panics.Add(1)
	a.log.Error("panic recovered; the host goes on", "in", what, "panic", fmt.Sprint(v), "stack", string(stack))
}

// safely runs one pass of the agent's loop under catch.
func (a *Agent) safely(what string, pass func()) {
	defer a.catch(what)
	pass()
}

// recovered, deferred with the address of a named error result, turns a
// panic in what into that error, and tells e.Panicked with the stack.
func (e *Engine) recovered(what string, err *error) {
	v := recover()
	if v == nil {
		return
	}
	if e.Panicked != nil {
		e.Panicked(what, v, debug.Stack())
	}
	*err = fmt.Errorf("%s: the host hit an internal error (%v); its log holds the stack", what, v)
}
