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
			// Only the leader begins a log: another may have begun it
			// while this one waited to lead.
			if err := j.awaitLead(ctx, "beginning the store's log"); err != nil {
				return err
			}
			if _, err := firstEntry(ctx, j.stream, j.cfg); err == nil {
				return nil
			} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
				return err
			}
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

// clusterPoll is how long a journal on a clustered bus waits before it
// tries again to open the log.
const clusterPoll = time.Second

// open opens the log (openLog); on a clustered bus it tries again until
// the cluster's JetStream answers, or ctx ends.
func (j *Journal) open(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	said := false
	for {
		kv, err := openLog(ctx, js, j.cfg)
		if err == nil || !j.cfg.Clustered || ctx.Err() != nil {
			return kv, err
		}
		if !said {
			j.log.Info("waiting for the controllers' cluster to open the store's log", "why", err)
			said = true
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(clusterPoll):
		}
	}
}
