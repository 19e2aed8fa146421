package mesh

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// controllersOf is the controllers' bus URLs the roster carries: given
// (a cluster of controllers), when they pass spec.CheckControllers; none
// otherwise, and a list that does not pass is said once here: the hosts
// then keep the bus addresses they have.
func controllersOf(given []string, log *slog.Logger) []string {
	if len(given) == 0 {
		return nil
	}
	if err := spec.CheckControllers(given); err != nil {
		log.Warn("the roster carries no controllers' bus URLs: the hosts keep those they have", "err", err)
		return nil
	}
	return slices.Clone(given)
}

// sendControllers sends the roster in force again, its names as they are,
// when it carries other controllers' bus URLs than controllers: a cluster
// of controllers that grew tells its hosts when its leader starts, not at
// the next push. Before any roster was sent there is nothing to send: the
// first push sends them.
func (rs *rosters) sendControllers(ctx context.Context, controllers []string) error {
	last, err := rs.db.LastRoster(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := rosterOf(last)
	if err != nil {
		return err
	}
	if slices.Equal(names.Controllers, controllers) {
		return nil
	}
	names.Controllers = controllers
	ref, sent, err := rs.sendRoster(ctx, names)
	if err != nil || !sent {
		return err
	}
	rs.log.Info("roster sent with the controllers' bus URLs", "seq", ref.Seq, "controllers", len(controllers))
	return nil
}

// controllersRetry is how long controllersLoop waits before it tries
// again.
const controllersRetry = 5 * time.Second

// controllersLoop sends the roster with the controllers' bus URLs
// (sendControllers) until it is sent, trying again every
// controllersRetry: the declaration stream of a cluster that just grew
// may refuse a publish for a while. Each try first publishes the roster
// recorded last when the stream lacks it (a try that recorded it and
// failed to publish it).
func (c *Controller) controllersLoop(ctx context.Context) {
	if len(c.composer.controllers) == 0 {
		return // a controller alone: its hosts keep their token's URLs
	}
	for {
		c.rosters.mu.Lock()
		err := c.rosters.publishRecordedRoster(ctx)
		c.rosters.mu.Unlock()
		if err == nil {
			err = c.rosters.sendControllers(ctx, c.composer.controllers)
		}
		if err == nil || ctx.Err() != nil {
			return
		}
		c.log.Warn("the roster with the controllers' bus URLs was not sent: it is tried again", "err", err, "in", controllersRetry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(controllersRetry):
		}
	}
}
