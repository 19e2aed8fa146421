package mesh

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// jsCallWait bounds how long jsCall asks again.
const jsCallWait = 15 * time.Second

// jsClusterUnavailable is JetStream's "system temporarily unavailable": a
// clustered JetStream with no meta leader for a moment (a peer restarting,
// an election) answers it to every API request.
const jsClusterUnavailable = 10008

// jsCall runs call, a JetStream API request, and runs it again, with a
// growing pause, while the bus says it cannot answer for now: no one
// responds (nats-server's JetStream API does not answer while the server
// reloads its accounts), or JetStream's cluster has no meta leader (a
// controller's server restarting, when controllers are three). Any other
// outcome is call's, as is that one after jsCallWait.
func jsCall(ctx context.Context, call func(context.Context) error) error {
	deadline := time.Now().Add(jsCallWait)
	pause := 10 * time.Millisecond
	for {
		err := call(ctx)
		if err == nil || !jsBusy(err) || time.Now().Add(pause).After(deadline) {
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

// jsBusy says whether err is a JetStream API that cannot answer for now.
func jsBusy(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, nats.ErrNoResponders) || errors.As(err, &api) && api.ErrorCode == jsClusterUnavailable
}
