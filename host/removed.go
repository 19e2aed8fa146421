package host

import (
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrRemoved is what Run returns once the bus refuses the node's credential
// for good: the node was removed from the mesh (mesh node remove).
var ErrRemoved = errors.New("removed from the mesh: the bus refuses this node's credential")

// How the agent tells a removal from a failure that passes. The bus drops a
// removed node's connections and refuses its credential from then on with
// an authorization violation, which is an answer from the bus itself: a bus
// that cannot be reached, a controller restarting, or a TLS failure give
// other errors. The rule: the node is removed once, at every look (one a
// second) for refusedFor, the connection is down and its last attempt was
// refused for authorization, and at least refusals attempts were refused in
// a row. An attempt seen failing any other way (its error replaces the
// refusal), or the connection seen up, starts the count again. nats.go's own rule
// (give up after two refusals by one server, and then never reconnect) is
// turned off with IgnoreAuthErrorAbort, so this one decides.
const (
	refusalLook = time.Second
	refusedFor  = 5 * time.Second
	refusals    = 3
)

// watchRemoval looks at nc until stop is called, and closes the channel it
// returns once the rule above says the node was removed.
func (a *Agent) watchRemoval(nc *nats.Conn) (removed <-chan struct{}, stop func()) {
	out, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer a.catch("removal watch")
		tick := time.NewTicker(refusalLook)
		defer tick.Stop()
		var since time.Time
		var base uint64
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if nc.IsConnected() || !errors.Is(nc.LastError(), nats.ErrAuthorization) {
				since = time.Time{}
				continue
			}
			// Reconnects counts the attempts that reached the bus (one that
			// cannot reach it clears the error, and the count starts again);
			// with a refusal the last error at every look, they count as
			// refusals.
			attempts := nc.Stats().Reconnects
			if since.IsZero() {
				since, base = time.Now(), attempts
				continue
			}
			if time.Since(since) >= refusedFor && 1+attempts-base >= refusals {
				close(out)
				return
			}
		}
	}()
	return out, func() { close(done) }
}
