package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lock takes the lock name, waiting while another holds it and it is
// fresh, until ctx ends. A lock is a key created only when absent, holding
// its holder and when it expires; its holder renews it while it holds it,
// so one past its expiry was left by a holder gone, and is taken over by
// its revision (of two taking it over, one wins).
func (s *edgeStore) Lock(ctx context.Context, name string) error {
	k := bucketKey("l", name)
	for {
		rev, err := s.kv.Create(ctx, k, s.lockValue())
		if err == nil {
			s.hold(name, k, rev)
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("lock %s in the edges' storage: %w", name, err)
		}
		e, err := s.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			continue // released meanwhile
		case err != nil:
			return fmt.Errorf("lock %s in the edges' storage: %w", name, err)
		}
		var held edgeLockValue
		if json.Unmarshal(e.Value(), &held) != nil || time.Now().After(held.Expires) {
			if rev, err := s.kv.Update(ctx, k, s.lockValue(), e.Revision()); err == nil {
				s.hold(name, k, rev)
				return nil
			}
			continue // another took it over first, or it was released
		}
		t := time.NewTimer(s.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("lock %s in the edges' storage: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// lockValue is a lock held by this storage from now.
func (s *edgeStore) lockValue() []byte {
	b, _ := json.Marshal(edgeLockValue{Owner: s.owner, Expires: time.Now().Add(s.ttl)})
	return b
}

// hold records the lock name (bucket key k) taken at rev, and renews it
// every third of its lifetime until it is released.
func (s *edgeStore) hold(name, k string, rev uint64) {
	h := &heldLock{revision: rev, stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	s.held[name] = h
	s.mu.Unlock()
	go func() {
		defer close(h.done)
		tick := time.NewTicker(s.ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.ttl/3)
			rev, err := s.kv.Update(ctx, k, s.lockValue(), h.revision)
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
				// A renewal whose answer was cut short may still have been
				// written: a lock still ours goes on from its revision.
				rev, err = s.stillOurs(ctx, k)
			}
			cancel()
			if errors.Is(err, errLockTaken) {
				return // taken over: it went stale meanwhile
			}
			if err == nil {
				s.mu.Lock()
				h.revision = rev
				s.mu.Unlock()
			}
		}
	}()
}

// errLockTaken is a held lock found under another owner.
var errLockTaken = errors.New("the lock was taken over")

// stillOurs is the revision of lock key k when this storage still owns
// it, or errLockTaken.
func (s *edgeStore) stillOurs(ctx context.Context, k string) (uint64, error) {
	e, err := s.kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, errLockTaken
	}
	if err != nil {
		return 0, err
	}
	var v edgeLockValue
	if json.Unmarshal(e.Value(), &v) != nil || v.Owner != s.owner {
		return 0, errLockTaken
	}
	return e.Revision(), nil
}

// Unlock releases the lock name, if this storage still holds it.
func (s *edgeStore) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h, ok := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("unlock %s in the edges' storage: not held", name)
	}
	close(h.stop)
	<-h.done
	err := s.kv.Delete(ctx, bucketKey("l", name), jetstream.LastRevision(h.revision))
	if err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("unlock %s in the edges' storage: %w", name, err)
	}
	return nil
}
