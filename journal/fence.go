package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/lease"
)

// LeaseKey is the key of the controllers' leader lease in the log's
// bucket: its value is the leader's cluster server name.
const LeaseKey = "leader"

// ErrNotLeading is a write asked of a fenced journal whose controller does
// not lead.
var ErrNotLeading = errors.New("this controller does not lead")

// fenceWait is how long a fenced write refused is sent again (a renewal
// of the lease in flight as it was sent) before it gives up; fencePoll
// is the pause between two sends.
const (
	fenceWait = 2 * time.Second
	fencePoll = 20 * time.Millisecond
)

// fenced says whether the journal's writes are fenced by a lease.
func (j *Journal) fenced() bool { return j.cfg.Fence != nil }

// leads says whether the journal may write now: it is not fenced, or its
// controller leads.
func (j *Journal) leads() bool {
	if j.cfg.Fence == nil {
		return true
	}
	_, ok := j.cfg.Fence()
	return ok
}

// publish writes msgs, subjects of the log's bucket, as one atomic batch:
// fenced by the lease when the config has a Fence (fencegroup.go). It
// returns the acknowledgement of the last of msgs.
func (j *Journal) publish(ctx context.Context, msgs ...*nats.Msg) (*jetstream.PubAck, error) {
	if !j.fenced() {
		return j.batch(ctx, msgs)
	}
	return j.fencedPublish(ctx, msgs)
}

// sendFenced sends msgs as one batch fenced by the lease. A refused batch
// is sent again, with the lease's revision as it is then, while the
// controller leads and for up to fenceWait: the lease's own renewal in
// flight refuses it too. One refused while the controller does not lead,
// or still refused after fenceWait (another took the lease), fails
// (lease.ErrFenced, or ErrNotLeading when it never went out).
func (j *Journal) sendFenced(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	var refused error
	deadline := time.Now().Add(fenceWait)
	for {
		rev, ok := j.cfg.Fence()
		if !ok {
			if refused != nil {
				return nil, fmt.Errorf("%w (%s)", refused, j.leaderNamed(ctx))
			}
			return nil, fmt.Errorf("%w: %s", ErrNotLeading, j.leaderNamed(ctx))
		}
		ack, err := lease.Fenced(ctx, j.js, j.cfg.bucket(), LeaseKey, rev, msgs...)
		if !errors.Is(err, lease.ErrFenced) {
			return ack, err
		}
		refused = err
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (%s)", refused, j.leaderNamed(ctx))
		}
		t := time.NewTimer(fencePoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, refused
		case <-t.C:
		}
	}
}

// batch writes msgs unfenced: one message as a put, more as an atomic
// batch, so the log holds all of them, consecutive, or none.
func (j *Journal) batch(ctx context.Context, msgs []*nats.Msg) (*jetstream.PubAck, error) {
	if len(msgs) == 1 {
		return j.js.PublishMsg(ctx, msgs[0])
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	for i, m := range msgs {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(batchIDHeader, id)
		m.Header.Set(batchSeqHeader, fmt.Sprint(i+1))
	}
	last := msgs[len(msgs)-1]
	last.Header.Set(batchCommitHeader, "1")
	nc := j.js.Conn()
	for _, m := range msgs[:len(msgs)-1] {
		if err := nc.PublishMsg(m); err != nil {
			return nil, err
		}
	}
	return j.js.PublishMsg(ctx, last)
}

// put writes value under key of the log's bucket, fenced when the config
// has a Fence, and returns its revision.
func (j *Journal) put(ctx context.Context, key string, value []byte) (uint64, error) {
	ack, err := j.publish(ctx, &nats.Msg{Subject: lease.Subject(j.cfg.bucket(), key), Data: value})
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// leaderNamed says who holds the lease, as the bucket has it.
func (j *Journal) leaderNamed(ctx context.Context) string {
	e, err := j.kv.Get(ctx, LeaseKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "no controller leads"
	}
	if err != nil {
		return fmt.Sprintf("the leader is not known: %v", err)
	}
	return "the leader is " + string(e.Value())
}

// awaitLead waits until the journal may write: at once when it is not
// fenced. what says what waits, in the log.
func (j *Journal) awaitLead(ctx context.Context, what string) error {
	if j.leads() {
		return nil
	}
	j.log.Info("waiting to lead before "+what, "leader", j.leaderNamed(ctx))
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !j.leads() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// CaughtUp waits until the view has applied every entry the log holds
// now. A controller that took the lease calls it before it acts on the
// view: every entry a former leader wrote is below the lease's revision,
// and no other writer can append after it.
func (j *Journal) CaughtUp(ctx context.Context) error {
	select {
	case <-j.ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	last, err := lastRevision(ctx, j.stream, j.cfg)
	if err != nil {
		return err
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for j.appliedRev.Load() < last {
		select {
		case <-ctx.Done():
			return fmt.Errorf("catch up with the store's log at %d: %w", last, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}
