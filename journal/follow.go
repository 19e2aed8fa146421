package journal

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// followPoll is how often a journal that follows looks for the log's
// first entry while the log holds none.
const followPoll = 250 * time.Millisecond

// awaitLog waits until the log holds an entry, when it holds none: a
// journal that follows (Config.Follow) never begins a log, and one that
// does not begins it now.
func (j *Journal) awaitLog(ctx context.Context) error {
	logged := false
	for {
		_, err := firstEntry(ctx, j.stream, j.cfg)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return err
		}
		if !j.cfg.Follow {
			_, err := j.begin(ctx)
			return err
		}
		if !logged {
			j.log.Info("the store's log holds no entry: waiting for the controller that begins it")
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followPoll):
		}
	}
}
