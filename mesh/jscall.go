package mesh

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
)

// jsCallWait bounds how long jsCall asks again.
const jsCallWait = 15 * time.Second

// jsCall runs call, a JetStream API request, and runs it again, with a
// growing pause, while the bus answers that no one responds: nats-server's
// JetStream API does not answer while the server reloads its accounts. The
// bus reloaded them at every change of its users until the users were
// admitted by a callback (package broker); nothing reloads them now, and
// this stays the guard against a JetStream API that has no responder for a
// moment. Any other outcome is call's, as is that one after jsCallWait.
func jsCall(ctx context.Context, call func(context.Context) error) error {
	deadline := time.Now().Add(jsCallWait)
	pause := 10 * time.Millisecond
	for {
		err := call(ctx)
		if err == nil || !errors.Is(err, nats.ErrNoResponders) || time.Now().Add(pause).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}
