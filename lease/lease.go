// Package lease is a leader lease on a JetStream KV key, and the fence that
// makes a deposed leader's late write fail. A campaign creates the key with
// a TTL the bus keeps, renews it by revision every third of the TTL, steps
// down on any failed renewal, and leads only once a renewal succeeded.
// Leadership rests on the bus's TTL and the key's revisions alone: a
// campaigner's clock only measures intervals of its own. A fenced write is
// an atomic batch the bus stores only while the lease key's last revision
// is the one the writer holds.
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Config is what a campaign needs.
type Config struct {
	// Bucket is the KV bucket the lease key lives in, made by Bucket.
	// Fenced writes go to the same bucket.
	Bucket string
	// Key is the lease key.
	Key string
	// Name is this campaigner's name: the key's value while it holds it.
	Name string
	// TTL is how long the bus keeps the key after its last renewal: a
	// whole number of seconds, the bus's unit for a key's TTL.
	TTL time.Duration
}

// Deps is what a campaign uses.
type Deps struct {
	// JS is JetStream on the bus.
	JS jetstream.JetStream
	// Now is the campaigner's clock; nil is time.Now. It only measures
	// how long ago this campaigner sent its last renewal.
	Now func() time.Time
	// Pause, when set, is called before each attempt to create or renew
	// the key; a test blocks in it to stand for a process stopped.
	Pause func()
}

// Role is what a campaigner is to the lease.
type Role int

const (
	// Follower holds no lease: it tries to create the key.
	Follower Role = iota
	// Candidate created the key and awaits its first renewal.
	Candidate
	// Leader renewed the key at least once.
	Leader
)

func (r Role) String() string {
	switch r {
	case Candidate:
		return "candidate"
	case Leader:
		return "leader"
	}
	return "follower"
}

// State is a campaigner's standing.
type State struct {
	// Role is what its last attempt made it.
	Role Role
	// Leading holds while Role is Leader and its last successful renewal
	// was sent less than two thirds of the TTL ago, by its own clock: the
	// key outlives that by a third of the TTL at least, so a campaigner
	// stopped past it (a paused process) does not lead when it resumes,
	// before its next renewal fails. Act as leader only while it holds.
	Leading bool
	// Revision is the lease key's revision while Role is not Follower: what
	// a fenced write expects.
	Revision uint64
	// Since is when it took Role, by its own clock.
	Since time.Time
}

// ErrNotLeader is a fenced write asked of a campaigner that is not leading.
var ErrNotLeader = errors.New("not the leader")

// Campaign campaigns for one lease.
type Campaign struct {
	cfg     Config
	log     *slog.Logger
	deps    Deps
	subject string

	// writeMu makes a renewal and a fenced write one at a time: the bus
	// refuses a write expecting the lease key's revision while a renewal
	// of it is in flight.
	writeMu sync.Mutex

	// mu guards what follows.
	mu      sync.Mutex
	kv      jetstream.KeyValue
	role    Role
	rev     uint64
	sent    time.Time
	since   time.Time
	changed chan struct{}
}

// New checks cfg and starts nothing.
func New(cfg Config, log *slog.Logger, deps Deps) (*Campaign, error) {
	if cfg.Bucket == "" || cfg.Key == "" || cfg.Name == "" {
		return nil, errors.New("lease: want a bucket, a key and a name")
	}
	if cfg.TTL < time.Second || cfg.TTL%time.Second != 0 {
		return nil, fmt.Errorf("lease: TTL %s: want a whole number of seconds, at least 1", cfg.TTL)
	}
	if deps.JS == nil {
		return nil, errors.New("lease: no JetStream")
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	return &Campaign{
		cfg: cfg, log: log, deps: deps,
		subject: Subject(cfg.Bucket, cfg.Key),
		changed: make(chan struct{}),
	}, nil
}

// Leader is the campaigner's standing now, and a channel closed when its
// role or revision next changes.
func (c *Campaign) Leader() (State, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateLocked(), c.changed
}

func (c *Campaign) stateLocked() State {
	st := State{Role: c.role, Since: c.since}
	if c.role != Follower {
		st.Revision = c.rev
	}
	st.Leading = c.role == Leader && c.deps.Now().Sub(c.sent) < 2*c.cfg.TTL/3
	return st
}

// set records role and rev, the key's revision sent at sent, and wakes
// whoever waits on a change.
func (c *Campaign) set(role Role, rev uint64, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if role != c.role {
		c.since = c.deps.Now()
		c.log.Info("lease", "key", c.cfg.Key, "role", role.String(), "revision", rev)
	}
	changed := role != c.role || rev != c.rev
	c.role, c.rev, c.sent = role, rev, sent
	if changed {
		close(c.changed)
		c.changed = make(chan struct{})
	}
}

// Run campaigns until ctx ends, then gives the lease up if it holds it, so
// another campaigner need not wait for the TTL.
func (c *Campaign) Run(ctx context.Context) error {
	tick := time.NewTicker(c.cfg.TTL / 3)
	defer tick.Stop()
	for {
		c.attempt(ctx)
		select {
		case <-ctx.Done():
			c.resign()
			return nil
		case <-tick.C:
		}
	}
}

// attempt creates the key as a follower, or renews it as a candidate or a
// leader, within a third of the TTL: a renewal that fails, or takes
// longer, steps down while the key still outlives the last renewal sent.
func (c *Campaign) attempt(ctx context.Context) {
	if c.deps.Pause != nil {
		c.deps.Pause()
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	role, rev := c.role, c.rev
	c.mu.Unlock()
	actx, cancel := context.WithTimeout(ctx, c.cfg.TTL/3)
	defer cancel()
	sent := c.deps.Now()
	if role == Follower {
		kv, err := c.bucket(actx)
		if err != nil {
			c.log.Warn("lease: open the bucket", "bucket", c.cfg.Bucket, "err", err)
			return
		}
		rev, err := kv.Create(actx, c.cfg.Key, []byte(c.cfg.Name), jetstream.KeyTTL(c.cfg.TTL))
		if errors.Is(err, jetstream.ErrKeyExists) {
			rev, err = c.own(actx, kv)
		}
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyExists) {
				c.log.Debug("lease: create the key", "key", c.cfg.Key, "err", err)
			}
			return
		}
		c.set(Candidate, rev, sent)
		return
	}
	ack, err := c.renew(actx, rev)
	if err != nil {
		c.log.Warn("lease: renewal failed, stepping down", "key", c.cfg.Key, "revision", rev, "err", err)
		c.set(Follower, 0, time.Time{})
		return
	}
	c.set(Leader, ack.Sequence, sent)
}

// renewRetry is how long a renewal refused while a fenced write was in
// flight waits before it is sent again.
const renewRetry = 20 * time.Millisecond

// renew writes the key again, expecting rev. The bus also refuses it,
// as a wrong last sequence, while a fenced write that expects the key's
// revision is in flight (the journal's appends, which do not wait for a
// renewal): when the key still holds this campaigner's name at rev,
// nothing else wrote it, and the renewal is sent again until ctx ends.
func (c *Campaign) renew(ctx context.Context, rev uint64) (*jetstream.PubAck, error) {
	for {
		ack, err := c.deps.JS.PublishMsg(ctx, &nats.Msg{Subject: c.subject, Data: []byte(c.cfg.Name)},
			jetstream.WithExpectLastSequencePerSubject(rev), jetstream.WithMsgTTL(c.cfg.TTL))
		var api *jetstream.APIError
		if err == nil || !errors.As(err, &api) ||
			(api.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence && api.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return ack, err
		}
		kv, kerr := c.bucket(ctx)
		if kerr != nil {
			return nil, err
		}
		e, gerr := kv.Get(ctx, c.cfg.Key)
		if gerr != nil || e.Revision() != rev || string(e.Value()) != c.cfg.Name {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(renewRetry):
		}
	}
}

// own is the key's revision when it holds this campaigner's own name:
// written by a renewal of its own whose acknowledgement was lost (a
// loaded bus), or by its process before a restart, since no other
// campaigner writes its name and one process at a time runs under it.
// It is taken as created, and renewed next; a key another holds is
// jetstream.ErrKeyExists.
func (c *Campaign) own(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	e, err := kv.Get(ctx, c.cfg.Key)
	if err != nil {
		return 0, err
	}
	if string(e.Value()) != c.cfg.Name {
		return 0, jetstream.ErrKeyExists
	}
	c.log.Info("lease: the key holds this campaigner's name: taken again", "key", c.cfg.Key, "revision", e.Revision())
	return e.Revision(), nil
}

// bucket is the lease's KV bucket, opened once.
func (c *Campaign) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	c.mu.Lock()
	kv := c.kv
	c.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := c.deps.JS.KeyValue(ctx, c.cfg.Bucket)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.kv = kv
	c.mu.Unlock()
	return kv, nil
}

// resign deletes the key if this campaigner holds it, expecting its
// revision, so a key another took is left alone.
func (c *Campaign) resign() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	role, rev, kv := c.role, c.rev, c.kv
	c.mu.Unlock()
	if role == Follower || kv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.TTL/3)
	defer cancel()
	if err := kv.Delete(ctx, c.cfg.Key, jetstream.LastRevision(rev)); err != nil {
		c.log.Warn("lease: give the lease up", "key", c.cfg.Key, "err", err)
	}
	c.set(Follower, 0, time.Time{})
}

// Publish publishes msgs, to subjects of the lease's bucket, as one
// atomic batch fenced by the lease (see Fenced), if the campaigner is
// leading.
func (c *Campaign) Publish(ctx context.Context, msgs ...*nats.Msg) (*jetstream.PubAck, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	c.mu.Lock()
	st := c.stateLocked()
	c.mu.Unlock()
	if !st.Leading {
		return nil, ErrNotLeader
	}
	return Fenced(ctx, c.deps.JS, c.cfg.Bucket, c.cfg.Key, st.Revision, msgs...)
}

// Put sets key of the lease's bucket to value, fenced by the lease, if the
// campaigner is leading. It returns the key's new revision.
func (c *Campaign) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ack, err := c.Publish(ctx, &nats.Msg{Subject: Subject(c.cfg.Bucket, key), Data: value})
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}
