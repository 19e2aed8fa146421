// Package journal keeps the controller's truth on the bus: every write of
// the store is appended, as one entry naming the store's method and its
// arguments, to a JetStream KV bucket (a replicated log of the store's
// writes), and the controller's SQLite store is a view of that log, fed
// by an ordered consumer that applies each entry by calling the same
// store method in a transaction that also records the entry's revision.
// A writer waits until its own entry is applied to the local view, and
// gets that apply's result. The log starts with a snapshot of the store
// as it was when the log began (a mesh made before the log, and genesis,
// write the store directly), kept in an object store, and the applier
// compacts it every so often: a newer snapshot, the entries before it
// purged. A view is rebuilt from the newest snapshot and the entries
// after it.
package journal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/lease"
	"github.com/mesh-fleet/mesh/store"
)

// ErrBehind is a store behind the log's oldest snapshot: the entries it
// has yet to apply were compacted away (it was down across a
// compaction), and only a rebuild from the log brings it up.
var ErrBehind = errors.New("the store is behind its log")

// DefaultBucket is the KV bucket of the store's log.
const DefaultBucket = "truth"

// Config is where the log is kept.
type Config struct {
	// Bucket is the log's KV bucket (DefaultBucket when empty); its
	// snapshots are kept in the object store Bucket-snapshots.
	Bucket string
	// Replicas is how many servers keep the log and its snapshots; zero
	// is one.
	Replicas int
	// CompactEntries and CompactBytes are how many entries, or bytes of
	// entries, the applier applies before it compacts the log (a new
	// snapshot, and the entries before it purged), but no more often
	// than CompactEvery. Zero is the default: 10,000 entries, 64 MiB,
	// ten minutes.
	CompactEntries int
	CompactBytes   int64
	CompactEvery   time.Duration
	// ChunkKeep is how long an upload's chunk, kept beside the log,
	// outlives the snapshot of a compaction that holds its write: the
	// most time between a chunk's put and its entry's append. Zero is a
	// minute.
	ChunkKeep time.Duration
	// PutBackMark is the file the launcher leaves beside a store it put
	// back, falling back from a version. When it is there, the log's
	// entries (the failed version's writes among them, which this
	// version may not know) are discarded and a new log begins from the
	// store; then the mark is removed.
	PutBackMark string
	// Follow is set for a controller that joined a cluster: it never
	// begins a log (nor a new one from its store, whatever the mark
	// says), and while the log holds no entry it waits for one.
	Follow bool
	// Clustered is set when the bus is a server of the controllers'
	// cluster: its JetStream answers once the cluster has elected a
	// leader of its own, so opening the log is tried again until ctx
	// ends.
	Clustered bool
	// Fence, when set, is the controllers' leader lease as this one holds
	// it: the revision of LeaseKey it holds, and whether it leads. Every
	// write to the log is then an atomic batch the bus stores only while
	// that revision is the lease's last (lease.Fenced), refused while it
	// does not lead; the log begins, restarts and compacts only while it
	// leads. Nil is a controller alone: nothing is fenced.
	Fence func() (rev uint64, ok bool)
}

func (c Config) bucket() string {
	if c.Bucket == "" {
		return DefaultBucket
	}
	return c.Bucket
}

func (c Config) snapshots() string { return c.bucket() + "-snapshots" }

func (c Config) replicas() int { return max(c.Replicas, 1) }

// prefix is the subject prefix of the log's entries in the bucket's
// stream: each entry has a key of its own ("w." and a unique id), so the
// bucket's history of one per key keeps every entry.
func (c Config) prefix() string { return lease.Subject(c.bucket(), entryKeyPrefix) }

const entryKeyPrefix = "w."

// voidKeyPrefix and an entry's id is the key that voids the entry: its
// write is applied as refused.
const voidKeyPrefix = "void."

// entry is one write in the log.
type entry struct {
	Method string          `json:"m"`
	Args   json.RawMessage `json:"a"`
}

// outcome is what applying an entry returned.
type outcome struct {
	result any
	err    error
}

// Journal appends the store's writes to the log and applies the log to
// the store.
type Journal struct {
	cfg     Config
	log     *slog.Logger
	db      *store.DB
	connect func(context.Context) (jetstream.JetStream, error)
	ops     map[string]applyFunc
	ready   chan struct{}

	// js is the bus, kv the log's bucket and stream its stream, set
	// before ready closes.
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream

	// since is what the applier applied since the last compaction. Only
	// the applier reads or writes it.
	since sinceSnapshot
	// compacting is set while a compaction runs; compactions counts
	// those running, which Run waits for before it returns.
	compacting  atomic.Bool
	compactions sync.WaitGroup

	// appliedRev is the revision the view has applied, as the applier
	// last recorded it.
	appliedRev atomic.Uint64

	// voided are the ids of the entries voided in the log: read from the
	// bucket when Run begins, and added to as the applier voids one.
	// Only the applier reads or writes it.
	voided map[string]bool

	// mu guards waiting: the writers waiting for their entry's apply, by
	// the entry's key.
	mu      sync.Mutex
	waiting map[string]chan outcome

	// chunksMu guards chunks: the bytes of the chunks this process's
	// writers put, by object, until their entry is applied.
	chunksMu sync.Mutex
	chunks   map[string][]byte

	// fenced are the fenced writes waiting to be sent (fencegroup.go).
	fenceQ fenceQueue
}

// New is a journal keeping db's writes in the log cfg names, on the bus
// connect reaches once the bus runs. It starts nothing.
func New(cfg Config, log *slog.Logger, db *store.DB, connect func(context.Context) (jetstream.JetStream, error)) *Journal {
	j := &Journal{cfg: cfg, log: log, db: db, connect: connect, ops: applyFuncs(),
		ready: make(chan struct{}), waiting: map[string]chan outcome{}, chunks: map[string][]byte{}}
	j.ops[putChunkMethod] = j.applyChunk
	return j
}

// Ready is closed once the view has applied every entry the log held when
// Run began: from then on writes are served.
func (j *Journal) Ready() <-chan struct{} { return j.ready }

// Store is the store the controller uses: reads from the view, writes
// through the log.
func (j *Journal) Store() *View { return newView(j) }

// Run makes the log's bucket, starts the log with a snapshot if it holds
// no entry (or a new log, if the store is the truth), and applies every
// entry to the view until ctx ends, compacting the log as it goes.
func (j *Journal) Run(ctx context.Context) error {
	js, err := j.connect(ctx)
	if err != nil {
		return err
	}
	kv, err := j.open(ctx, js)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	stream, err := js.Stream(ctx, "KV_"+j.cfg.bucket())
	if err != nil {
		return fmt.Errorf("read the log's stream: %w", err)
	}
	j.js, j.kv, j.stream = js, kv, stream
	if !j.cfg.Follow {
		if err := j.restartIfTruth(ctx); err != nil {
			return err
		}
	}
	if err := j.awaitLog(ctx); err != nil {
		return err
	}
	if j.voided, err = voids(ctx, kv); err != nil {
		return err
	}
	last, err := lastRevision(ctx, stream, j.cfg)
	if err != nil {
		return err
	}
	applied, err := j.db.Applied(ctx)
	if err != nil {
		return err
	}
	if applied > last {
		return fmt.Errorf("the store has applied revision %d of its log, which ends at %d: the store is not a view of this log", applied, last)
	}
	oldest, err := oldestSnapshot(ctx, stream, j.cfg)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("the store's log holds entries but names no snapshot to begin from: %w", err)
	}
	if err != nil {
		return err
	}
	if applied < oldest.Revision {
		return fmt.Errorf("the store has applied revision %d of its log, whose entries up to %d are compacted away: remove the store to rebuild it from the log: %w", applied, oldest.Revision, ErrBehind)
	}
	if j.since, err = j.held(ctx); err != nil {
		return err
	}
	j.appliedRev.Store(applied)
	if applied == last {
		close(j.ready)
	}
	defer j.compactions.Wait()
	if err := j.follow(ctx, js, applied, last); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// openLog makes the log's bucket, fit for fenced writes, and its
// snapshots' object store, or opens them.
func openLog(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.KeyValue, error) {
	replicas, err := keptReplicas(ctx, js, "KV_"+cfg.bucket(), cfg.replicas())
	if err != nil {
		return nil, fmt.Errorf("open the store's log: %w", err)
	}
	kv, err := lease.Bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.bucket(),
		Description: "the controller's store: a log of its writes",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("open the store's log: %w", err)
	}
	if _, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:   cfg.snapshots(),
		Storage:  jetstream.FileStorage,
		Replicas: replicas,
	}); err != nil {
		return nil, fmt.Errorf("open the store's snapshots: %w", err)
	}
	if _, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      cfg.blobs(),
		Description: "the chunks of the blobs the store's log names",
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	}); err != nil {
		return nil, fmt.Errorf("open the store's blobs: %w", err)
	}
	return kv, nil
}

// voids are the ids of the entries voided in the log kv holds.
func voids(ctx context.Context, kv jetstream.KeyValue) (map[string]bool, error) {
	keys, err := kv.ListKeysFiltered(ctx, voidKeyPrefix+">")
	if err != nil {
		return nil, fmt.Errorf("read the voids of the store's log: %w", err)
	}
	defer keys.Stop()
	ids := map[string]bool{}
	for k := range keys.Keys() {
		ids[strings.TrimPrefix(k, voidKeyPrefix)] = true
	}
	return ids, nil
}

// firstEntry is the log's first entry, or jetstream.ErrMsgNotFound.
func firstEntry(ctx context.Context, stream jetstream.Stream, cfg Config) (*jetstream.RawStreamMsg, error) {
	msg, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(cfg.prefix()+">"))
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("read the log's first entry: %w", err)
	}
	return msg, nil
}

// lastRevision is the revision of the log's last entry.
func lastRevision(ctx context.Context, stream jetstream.Stream, cfg Config) (uint64, error) {
	msg, err := stream.GetLastMsgForSubject(ctx, cfg.prefix()+">")
	if err != nil {
		return 0, fmt.Errorf("read the log's last entry: %w", err)
	}
	return msg.Sequence, nil
}

// follow applies the log's entries after applied until ctx ends, and
// closes ready once it applied last.
func (j *Journal) follow(ctx context.Context, js jetstream.JetStream, applied, last uint64) error {
	cons, err := js.OrderedConsumer(ctx, "KV_"+j.cfg.bucket(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{j.cfg.prefix() + ">"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    applied + 1,
	})
	if err != nil {
		return fmt.Errorf("follow the store's log: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("follow the store's log: %w", err)
	}
	// Stop ends a consumer's resets, which retry for ever; the context
	// given to Next ends a wait for a message even on a subscription a
	// reset replaced.
	go func() { <-ctx.Done(); it.Stop() }()
	var p parts
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("follow the store's log: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("follow the store's log: %w", err)
		}
		rev := meta.Sequence.Stream
		data, whole := msg.Data(), true
		if key := strings.TrimPrefix(msg.Subject(), j.cfg.prefix()); !strings.HasPrefix(key, snapshotKeyPrefix) {
			if data, whole, err = p.add(rev, key, data); err != nil {
				return err
			}
		}
		if !whole {
			continue
		}
		if err := j.apply(ctx, rev, msg.Subject(), data); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		j.appliedRev.Store(rev)
		if now := time.Now(); j.since.applied(j.cfg, len(data), now) && !j.compacting.Load() && j.leads() {
			j.compact(ctx, rev)
			j.since = sinceSnapshot{last: now}
		}
		if rev >= last {
			select {
			case <-j.ready:
			default:
				close(j.ready)
			}
		}
	}
}

// apply applies the entry of revision rev, on subject, to the view, and
// hands the outcome to its writer if it waits here. A write the store
// refuses is applied as refused (its revision recorded alone): every view
// refuses it alike. One the store could not make because another writer
// holds it is voided: a void key for the entry is put in the log before
// its writer hears the store's error, and any view applying the entry
// later (its journal started after the void was put, so it read the
// void) applies it as refused, so no view makes a write its writer was
// told failed.
func (j *Journal) apply(ctx context.Context, rev uint64, subject string, data []byte) error {
	e, err := readEntry(data)
	if err != nil {
		return fmt.Errorf("read entry %d of the store's log: %w", rev, err)
	}
	run := j.ops[e.Method]
	if e.Method == snapshotMethod {
		run = func(context.Context, *store.DB, json.RawMessage) (any, error) { return nil, nil }
	}
	if run == nil {
		return fmt.Errorf("entry %d of the store's log is a write this mesh (%s) does not know, %q: a newer mesh wrote it; run that version or newer", rev, binaryVersion(), e.Method)
	}
	id := strings.TrimPrefix(subject, j.cfg.prefix())
	if j.voided[id] {
		if err := j.db.MarkApplied(ctx, rev); err != nil && !transient(ctx, err) {
			return fmt.Errorf("apply entry %d of the store's log: %w", rev, err)
		}
		j.deliver(id, outcome{nil, fmt.Errorf("entry %d of the store's log was voided", rev)})
		return ctx.Err()
	}
	actx := store.WithRevision(ctx, rev)
	res, err := run(actx, j.db, e.Args)
	// Only the leader voids: a follower's view waits for its store and
	// applies the entry again, as the leader's did or voided it.
	for store.IsBusy(err) && !j.leads() {
		if werr := pause(ctx, busyRetry); werr != nil {
			return werr
		}
		actx = store.WithRevision(ctx, rev)
		res, err = run(actx, j.db, e.Args)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if store.IsBusy(err) {
		if verr := j.void(ctx, id, rev); verr != nil {
			return fmt.Errorf("apply entry %d of the store's log: void it: %w", rev, verr)
		}
		j.voided[id] = true
		j.deliver(id, outcome{res, err})
		return nil
	}
	if !store.Recorded(actx) {
		if merr := j.db.MarkApplied(ctx, rev); merr != nil && !transient(ctx, merr) {
			return fmt.Errorf("apply entry %d of the store's log: %w", rev, merr)
		}
	}
	j.deliver(id, outcome{res, err})
	return nil
}

// busyRetry is how long a follower's applier waits for its busy store
// before it applies an entry again.
const busyRetry = 100 * time.Millisecond

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// void puts the void of the entry id, of revision rev, in the log: created
// once when the journal is not fenced; fenced, put again with the same
// value by a leader that voids it again.
func (j *Journal) void(ctx context.Context, id string, rev uint64) error {
	value := []byte(strconv.FormatUint(rev, 10))
	if j.fenced() {
		_, err := j.put(ctx, voidKeyPrefix+id, value)
		return err
	}
	if _, err := j.kv.Create(ctx, voidKeyPrefix+id, value); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	return nil
}

// transient says err is one a view would not meet again: the store busy,
// or ctx ended.
func transient(ctx context.Context, err error) bool {
	return err != nil && (store.IsBusy(err) || ctx.Err() != nil)
}

func (j *Journal) deliver(id string, o outcome) {
	j.mu.Lock()
	ch := j.waiting[id]
	delete(j.waiting, id)
	j.mu.Unlock()
	if ch != nil {
		ch <- o
	}
}

// write appends method with args to the log, and waits until the view
// applied it: its result and error are the apply's.
func (j *Journal) write(ctx context.Context, method string, args any) (any, error) {
	select {
	case <-j.ready:
	case <-ctx.Done():
		return nil, fmt.Errorf("write %s: the store's log is not ready: %w", method, ctx.Err())
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", method, err)
	}
	data := encodeEntry(method, raw)
	id, err := newID()
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", method, err)
	}
	ch := make(chan outcome, 1)
	j.mu.Lock()
	j.waiting[id] = ch
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		delete(j.waiting, id)
		j.mu.Unlock()
	}()
	if err := j.appendEntry(ctx, id, data); err != nil {
		return nil, fmt.Errorf("write %s to the store's log: %w", method, err)
	}
	select {
	case o := <-ch:
		return o.result, o.err
	case <-ctx.Done():
		return nil, fmt.Errorf("write %s: wait for it to be applied: %w", method, ctx.Err())
	}
}

// newID is an entry's id, unique to it: its key in the bucket.
func newID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("entry id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
