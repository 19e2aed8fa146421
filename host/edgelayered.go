package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/nats-io/nats.go"
)

// How long one operation on the edges' bucket may take before the edge
// answers from its own copy, and how long after the bucket failed on a
// live connection it is tried again.
const (
	edgeBucketTimeout = 3 * time.Second
	edgeBucketRetry   = 10 * time.Second
)

// errBusGone ends a wait for a lock in the bucket when the host's bus
// connection drops meanwhile.
var errBusGone = errors.New("the bus connection is down")

// edgeLayered is the storage of an edge that shares the edges' bucket:
// the bucket, so that edges obtain each name once, over the host's own
// copy in its state directory (D/host/edge, 0700 directories and 0600
// files, the PEMs in the clear as certmagic writes them, like the host's
// other keys there), so that the host keeps serving while the controller,
// which runs the bus, is down, restarts included.
//
// Every value is written to both (write-through). Reads, lists and locks
// go to the bucket while it answers, and to the local copy while it does
// not: a bus error or a timeout. The bucket's "no such key" is an answer,
// not an outage. The bucket is opened on first use, not when the edge
// starts, and tried again later after a failure, so an edge starts with
// the bus down.
//
// With the bucket out of reach, locks are the local directory's: two
// edges cut off from the bus may each order a certificate for one name
// meanwhile, which costs an order and serves a valid certificate either
// way. What this edge writes or deletes meanwhile is copied to the bucket
// once it answers again; which keys is held in memory, so what a host
// wrote cut off and did not copy up before it restarted stays local
// (the bucket's values are then the ones read, and renewed when due).
type edgeLayered struct {
	local *certmagic.FileStorage
	nc    *nats.Conn
	key   []byte // the edge storage key, raw
	log   *slog.Logger

	timeout, retry time.Duration

	mu       sync.Mutex
	bucket   *edgeStore // nil until opened
	failedAt time.Time  // the bucket's last failure on a live connection
	down     bool       // the last operation found the bucket out of reach
	dirty    map[string]uint64
	gen      uint64 // the last dirty mark's
	copying  bool
	locks    map[string]bool // held locks, true when held in the bucket
}

var _ certmagic.Storage = (*edgeLayered)(nil)

// newEdgeLayered is the storage of an edge on the bucket over nc, its
// values sealed under key, with its copy in dir.
func newEdgeLayered(dir string, nc *nats.Conn, key []byte, log *slog.Logger) *edgeLayered {
	return &edgeLayered{local: &certmagic.FileStorage{Path: dir}, nc: nc, key: key, log: log,
		timeout: edgeBucketTimeout, retry: edgeBucketRetry, dirty: map[string]uint64{}, locks: map[string]bool{}}
}

// reach is the bucket, opened if it is not yet, or nil when it is out of
// reach now: the connection is down, or it failed a moment ago.
func (s *edgeLayered) reach(ctx context.Context) *edgeStore {
	if !s.nc.IsConnected() {
		s.lost(errBusGone, false)
		return nil
	}
	s.mu.Lock()
	b, wait := s.bucket, !s.failedAt.IsZero() && time.Since(s.failedAt) < s.retry
	s.mu.Unlock()
	if wait {
		return nil
	}
	if b != nil {
		return b
	}
	octx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	b, err := openEdgeStore(octx, s.nc, s.key)
	if err != nil {
		if ctx.Err() == nil {
			s.lost(err, true)
		}
		return nil
	}
	s.mu.Lock()
	if s.bucket == nil {
		s.bucket = b
	}
	b = s.bucket
	s.mu.Unlock()
	return b
}

// answered says whether err from the bucket is an answer (none, or no
// such key), and notes the outage when it is not. A caller's own ended
// context is neither: ok false, and no outage noted.
func (s *edgeLayered) answered(ctx context.Context, err error) bool {
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		s.back()
		return true
	}
	if ctx.Err() == nil {
		s.lost(err, true)
	}
	return false
}

// lost notes the bucket out of reach; retry says to wait before trying it
// again (it failed on a live connection).
func (s *edgeLayered) lost(err error, retry bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if retry {
		s.failedAt = time.Now()
	}
	if !s.down {
		s.down = true
		s.log.Warn("the edges' bucket is out of reach: certificates are kept in the host's directory only", "err", err)
	}
}

// back notes the bucket answering, and copies up what was written
// without it.
func (s *edgeLayered) back() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failedAt = time.Time{}
	if s.down {
		s.down = false
		s.log.Info("the edges' bucket answers again", "to_copy", len(s.dirty))
	}
	if len(s.dirty) > 0 && !s.copying {
		s.copying = true
		go s.copyUp()
	}
}

// mark notes key written (or deleted) locally without the bucket.
func (s *edgeLayered) mark(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.dirty[key] = s.gen
}

// isDirty says whether key was written locally and not yet copied up.
func (s *edgeLayered) isDirty(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.dirty[key]
	return ok
}

// copyUp copies every key written locally without the bucket up to it:
// its local value, or its deletion when it has none. It stops at the
// first failure; the keys left are copied when the bucket answers again.
func (s *edgeLayered) copyUp() {
	defer func() {
		s.mu.Lock()
		s.copying = false
		s.mu.Unlock()
	}()
	s.mu.Lock()
	todo := make(map[string]uint64, len(s.dirty))
	for k, g := range s.dirty {
		todo[k] = g
	}
	b := s.bucket
	s.mu.Unlock()
	if b == nil {
		return
	}
	copied := 0
	for k, g := range todo {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		v, err := s.local.Load(ctx, k)
		switch {
		case err == nil:
			err = b.Store(ctx, k, v)
		case errors.Is(err, fs.ErrNotExist):
			err = b.Delete(ctx, k)
		default:
			err = nil // a directory, or unreadable: nothing to copy
		}
		cancel()
		if err != nil {
			s.lost(err, true)
			s.log.Warn("values written without the edges' bucket not all copied up to it", "copied", copied, "left", len(todo)-copied, "err", err)
			return
		}
		copied++
		s.mu.Lock()
		if s.dirty[k] == g {
			delete(s.dirty, k)
		}
		s.mu.Unlock()
	}
	s.log.Info("values written without the edges' bucket copied up to it", "copied", copied)
}

// bucketCtx is ctx bounded by the time one bucket operation may take.
func (s *edgeLayered) bucketCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// Store writes value at key in the local copy and in the bucket. It is
// stored when either took it; the local copy failing is logged, the
// bucket out of reach leaves key to copy up.
func (s *edgeLayered) Store(ctx context.Context, key string, value []byte) error {
	lerr := s.local.Store(ctx, key, value)
	if lerr != nil {
		lerr = fmt.Errorf("store %s in the edge's directory: %w", key, lerr)
	}
	if b := s.reach(ctx); b != nil {
		bctx, cancel := s.bucketCtx(ctx)
		err := b.Store(bctx, key, value)
		cancel()
		if s.answered(ctx, err) {
			if lerr != nil {
				s.log.Warn("the edge's copy of a value is not kept", "key", key, "err", lerr)
			}
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(err, lerr)
		}
	}
	if lerr != nil {
		return lerr
	}
	s.mark(key)
	return nil
}

// Load is the value at key: the bucket's while it answers, the local
// copy's when it does not or when key was written without it.
func (s *edgeLayered) Load(ctx context.Context, key string) ([]byte, error) {
	if !s.isDirty(key) {
		if b := s.reach(ctx); b != nil {
			bctx, cancel := s.bucketCtx(ctx)
			v, err := b.Load(bctx, key)
			cancel()
			if s.answered(ctx, err) || ctx.Err() != nil {
				return v, err
			}
		}
	}
	v, err := s.local.Load(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("load %s from the edge's directory: %w", key, err)
	}
	return v, nil
}

// Delete deletes key and what is under it from both.
func (s *edgeLayered) Delete(ctx context.Context, key string) error {
	if err := s.local.Delete(ctx, key); err != nil {
		return fmt.Errorf("delete %s from the edge's directory: %w", key, err)
	}
	if b := s.reach(ctx); b != nil {
		bctx, cancel := s.bucketCtx(ctx)
		err := b.Delete(bctx, key)
		cancel()
		if s.answered(ctx, err) {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
	s.mark(key)
	return nil
}

// Exists says whether key is a value or has values under it.
func (s *edgeLayered) Exists(ctx context.Context, key string) bool {
	if !s.isDirty(key) {
		if b := s.reach(ctx); b != nil {
			bctx, cancel := s.bucketCtx(ctx)
			keys, err := b.keys(bctx, key)
			cancel()
			if s.answered(ctx, err) {
				return len(keys) > 0
			}
		}
	}
	return s.local.Exists(ctx, key)
}

// List is the keys under path, as the bucket or else the local copy has
// them.
func (s *edgeLayered) List(ctx context.Context, path string, recursive bool) ([]string, error) {
	if b := s.reach(ctx); b != nil {
		bctx, cancel := s.bucketCtx(ctx)
		keys, err := b.List(bctx, path, recursive)
		cancel()
		if s.answered(ctx, err) || ctx.Err() != nil {
			return keys, err
		}
	}
	keys, err := s.local.List(ctx, path, recursive)
	if err != nil {
		return nil, fmt.Errorf("list %s in the edge's directory: %w", path, err)
	}
	return keys, nil
}

// Stat is what the bucket, or else the local copy, knows of key.
func (s *edgeLayered) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	if !s.isDirty(key) {
		if b := s.reach(ctx); b != nil {
			bctx, cancel := s.bucketCtx(ctx)
			info, err := b.Stat(bctx, key)
			cancel()
			if s.answered(ctx, err) || ctx.Err() != nil {
				return info, err
			}
		}
	}
	info, err := s.local.Stat(ctx, key)
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("stat %s in the edge's directory: %w", key, err)
	}
	return info, nil
}

// Lock takes the lock name in the bucket while it answers, else in the
// local directory (see edgeLayered). A wait in the bucket ends when the
// connection drops, and the lock is then taken locally.
func (s *edgeLayered) Lock(ctx context.Context, name string) error {
	if b := s.reach(ctx); b != nil {
		lctx, cancel := context.WithCancelCause(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-lctx.Done():
					return
				case <-tick.C:
					if !s.nc.IsConnected() {
						cancel(errBusGone)
						return
					}
				}
			}
		}()
		err := b.Lock(lctx, name)
		if err != nil && context.Cause(lctx) == errBusGone {
			err = errBusGone
		}
		cancel(nil)
		<-watched
		if err == nil {
			s.back()
			s.held(name, true)
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		s.lost(err, !errors.Is(err, errBusGone))
	}
	if err := s.local.Lock(ctx, name); err != nil {
		return fmt.Errorf("lock %s in the edge's directory: %w", name, err)
	}
	s.held(name, false)
	return nil
}

// held notes the lock name held, in the bucket or locally.
func (s *edgeLayered) held(name string, inBucket bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.locks[name] = inBucket
}

// Unlock releases the lock name where it was taken. One in the bucket
// that cannot be released now expires there.
func (s *edgeLayered) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	inBucket, ok := s.locks[name]
	delete(s.locks, name)
	b := s.bucket
	s.mu.Unlock()
	if ok && inBucket && b != nil {
		bctx, cancel := s.bucketCtx(ctx)
		defer cancel()
		return b.Unlock(bctx, name)
	}
	if err := s.local.Unlock(ctx, name); err != nil {
		return fmt.Errorf("unlock %s in the edge's directory: %w", name, err)
	}
	return nil
}

// String names the storage in certmagic's logs.
func (s *edgeLayered) String() string {
	return "the edges' storage over the host's copy in " + s.local.Path
}
