package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/journal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// storeWithNodes is a store at path, written before the log, holding n
// nodes.
func storeWithNodes(t *testing.T, path string, n int, at time.Time) []spec.Heartbeat {
	t.Helper()
	db, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var hbs []spec.Heartbeat
	for i := range n {
		name := fmt.Sprintf("n%02d", i)
		if err := db.AddNode(context.Background(), store.Node{Name: name, Address: "10.0.0.1", NKey: "U" + name, Joined: at}); err != nil {
			t.Fatal(err)
		}
		hbs = append(hbs, spec.Heartbeat{Node: name, HostVersion: "v1", Protocol: spec.Protocol})
	}
	return hbs
}

// heartbeat writes rounds batches of hbs through v, and an audit entry
// every tenth round.
func heartbeat(t *testing.T, v *journal.View, hbs []spec.Heartbeat, rounds int, at time.Time) {
	t.Helper()
	ctx := context.Background()
	for r := range rounds {
		now := at.Add(time.Duration(r) * 10 * time.Second)
		for i := range hbs {
			hbs[i].AppliedSeq = uint64(r)
		}
		if failed, err := v.RecordHeartbeats(ctx, hbs, now); err != nil || len(failed) > 0 {
			t.Fatalf("RecordHeartbeats: %v, %v", failed, err)
		}
		if r%10 == 0 {
			if err := v.Audit(ctx, store.AuditEntry{At: now, Operator: "op", Verb: fmt.Sprint("v", r), Args: "{}", Outcome: "ok"}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// logState is what the log's stream holds.
func logState(t *testing.T, js jetstream.JetStream, bucket string) jetstream.StreamState {
	t.Helper()
	s, err := js.Stream(context.Background(), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

// snapshotNames are the objects of the log's snapshots.
func snapshotNames(t *testing.T, js jetstream.JetStream, bucket string) []string {
	t.Helper()
	// Bounded: a list whose consumer the bus never feeds waits for ever
	// on a context without a deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	obs, err := js.ObjectStore(ctx, bucket+"-snapshots")
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(ctx)
	if err != nil && err != jetstream.ErrNoObjectsFound {
		t.Fatal(err)
	}
	var names []string
	for _, i := range infos {
		names = append(names, i.Name)
	}
	return names
}

// removeStore deletes the store at path.
func removeStore(t *testing.T, path string) {
	t.Helper()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

// rebuilt is the view rebuilt at path from the log cfg names.
func rebuilt(t *testing.T, path string, connect func(context.Context) (jetstream.JetStream, error), cfg journal.Config) (*journal.View, func()) {
	t.Helper()
	removeStore(t, path)
	js, err := connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := journal.Rebuild(context.Background(), js, cfg, path); err != nil {
		t.Fatal(err)
	}
	return runningWith(t, path, connect, cfg)
}

// runFails runs a journal on the store at path and returns the error it
// stops with; it fails t if the journal gets ready.
func runFails(t *testing.T, path string, connect func(context.Context) (jetstream.JetStream, error), cfg journal.Config) error {
	t.Helper()
	db, err := store.OpenWith(context.Background(), path, store.Options{ViewOfLog: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	j := journal.New(cfg, quiet(), db, connect)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- j.Run(ctx) }()
	select {
	case <-j.Ready():
		cancel()
		<-done
		t.Fatal("the journal got ready")
	case err := <-done:
		if err == nil {
			t.Fatal("the journal stopped with no error")
		}
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("the journal neither ready nor stopped after 30s")
	}
	return nil
}

// A fleet heartbeating through a compacted log leaves the log bounded,
// far below the same writes kept whole; a view rebuilt from scratch
// reads the same; and a view behind the compacted entries is refused
// (journal.ErrBehind: its owner rebuilds it), not fed the entries after a
// gap.
func TestLogCompactedAndRebuilt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	connect := startBus(t, filepath.Join(dir, "js"))
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const nodes, rounds = 20, 300

	whole := journal.Config{Bucket: "whole"}
	wholePath := filepath.Join(dir, "whole.db")
	hbs := storeWithNodes(t, wholePath, nodes, at)
	v, stop := runningWith(t, wholePath, connect, whole)
	heartbeat(t, v, hbs, rounds, at)
	stop()
	wholeState := logState(t, js, whole.Bucket)

	compacted := journal.Config{Bucket: "compacted", CompactEntries: 50, CompactEvery: time.Nanosecond}
	path := filepath.Join(dir, "mesh.db")
	hbs = storeWithNodes(t, path, nodes, at)
	v, stop = runningWith(t, path, connect, compacted)
	heartbeat(t, v, hbs, rounds/2, at)
	behind := filepath.Join(dir, "behind.db")
	if err := store.Snapshot(ctx, path, behind); err != nil {
		t.Fatal(err)
	}
	stop()
	// The bucket's other keys: a lease, the void of an entry long
	// compacted away and that of one past the log's head.
	kv, err := js.KeyValue(ctx, compacted.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	for key, value := range map[string]string{"lease": "leader", "void.old": "1", "void.later": "999999999"} {
		if _, err := kv.Put(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	v, stop = runningWith(t, path, connect, compacted)
	heartbeat(t, v, hbs, rounds/2, at.Add(time.Hour))
	poll.Until(t, 30*time.Second, "the log compacted", func() error {
		s := logState(t, js, compacted.Bucket)
		names := snapshotNames(t, js, compacted.Bucket)
		if s.Msgs <= 2*50+4 && len(names) == 1 {
			return nil
		}
		return fmt.Errorf("%d messages, snapshots %v", s.Msgs, names)
	})
	for key, kept := range map[string]bool{"lease": true, "void.old": false, "void.later": true} {
		if _, err := kv.Get(ctx, key); (err == nil) != kept {
			t.Errorf("after a compaction, key %s: %v; want kept %v", key, err, kept)
		}
	}
	want := reads(t, v)
	stop()
	state := logState(t, js, compacted.Bucket)
	t.Logf("%d heartbeat batches of %d nodes: the log holds %d messages, %d bytes whole; %d messages, %d bytes compacted",
		rounds, nodes, wholeState.Msgs, wholeState.Bytes, state.Msgs, state.Bytes)
	if state.Bytes*3 > wholeState.Bytes || state.Msgs*3 > wholeState.Msgs {
		t.Errorf("compacted, the log holds %d messages, %d bytes; whole %d, %d: want a third or less", state.Msgs, state.Bytes, wholeState.Msgs, wholeState.Bytes)
	}

	v, _ = rebuilt(t, path, connect, compacted)
	if got := reads(t, v); got != want {
		t.Fatalf("rebuilt from the compacted log, the view answers\n%s\nwant\n%s", got, want)
	}
	if err := runFails(t, behind, connect, compacted); !errors.Is(err, journal.ErrBehind) || !strings.Contains(err.Error(), "compacted away") {
		t.Fatalf("a view behind the compacted entries: %v; want refused as behind (%v)", err, journal.ErrBehind)
	}
}

// A compaction cut short, between putting the snapshot and appending the
// entry naming it, or between that entry and the purge, leaves a log a
// view is rebuilt from alike; the next compaction clears what was left.
func TestCompactionCutShortIsSafe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	connect := startBus(t, filepath.Join(dir, "js"))
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "mesh.db")
	hbs := storeWithNodes(t, path, 5, at)
	v, stop := running(t, path, connect)
	heartbeat(t, v, hbs, 20, at)
	want := reads(t, v)
	stop()
	obs, err := js.ObjectStore(ctx, journal.DefaultBucket+"-snapshots")
	if err != nil {
		t.Fatal(err)
	}

	// Cut short after the snapshot was put: an object no entry names.
	if _, err := obs.PutBytes(ctx, "snapshot-orphan", []byte("not a store")); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.db")
	v, stop = rebuilt(t, other, connect, journal.Config{})
	if got := reads(t, v); got != want {
		t.Fatalf("rebuilt past a snapshot no entry names, the view answers\n%s\nwant\n%s", got, want)
	}
	stop()

	// Cut short after the entry naming the snapshot: nothing purged.
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := db.Applied(ctx)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(dir, "copy.db")
	if err := store.Snapshot(ctx, path, copyPath); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(copyPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: "snapshot-cut"}, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	args, _ := json.Marshal(map[string]any{"object": "snapshot-cut", "revision": rev})
	entry, _ := json.Marshal(map[string]any{"m": "snapshot", "a": json.RawMessage(args)})
	kv, err := js.KeyValue(ctx, journal.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "w.snap.cut", entry); err != nil {
		t.Fatal(err)
	}
	v, stop = rebuilt(t, other, connect, journal.Config{})
	if got := reads(t, v); got != want {
		t.Fatalf("rebuilt from the newer snapshot, the view answers\n%s\nwant\n%s", got, want)
	}
	stop()

	cfg := journal.Config{CompactEntries: 5, CompactEvery: time.Nanosecond}
	v, stop = runningWith(t, path, connect, cfg)
	heartbeat(t, v, hbs, 10, at.Add(time.Hour))
	poll.Until(t, 30*time.Second, "the leftover snapshots deleted", func() error {
		names := snapshotNames(t, js, journal.DefaultBucket)
		if len(names) == 1 && strings.HasPrefix(names[0], "snapshot-") && names[0] != "snapshot-cut" {
			return nil
		}
		return fmt.Errorf("snapshots %q", names)
	})
	want = reads(t, v)
	stop()
	v, _ = rebuilt(t, other, connect, cfg)
	if got := reads(t, v); got != want {
		t.Fatalf("rebuilt after the next compaction, the view answers\n%s\nwant\n%s", got, want)
	}
}

// putWrite appends an entry of method with args to the log, as a mesh
// that knows method would.
func putWrite(t *testing.T, js jetstream.JetStream, key, method string, args any) {
	t.Helper()
	raw, _ := json.Marshal(args)
	entry, _ := json.Marshal(map[string]any{"m": method, "a": json.RawMessage(raw)})
	kv, err := js.KeyValue(context.Background(), journal.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, entry); err != nil {
		t.Fatal(err)
	}
}

// An entry whose write this mesh does not know stops the applier with an
// error naming the write and this mesh's version; it is not skipped.
func TestUnknownWriteStopsTheApplier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.db")
	connect := startBus(t, filepath.Join(dir, "js"))
	v, stop := running(t, path, connect)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := v.Audit(ctx, store.AuditEntry{At: at, Operator: "op", Verb: "first", Args: "{}", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	stop()
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	putWrite(t, js, "w.future", "FromTheFuture", map[string]any{"x": 1})
	err = runFails(t, path, connect, journal.Config{})
	for _, want := range []string{`"FromTheFuture"`, "does not know", "this mesh ("} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the applier stopped with %q; want it to name %s", err, want)
		}
	}
}

// A store the launcher put back, falling back from a version, begins a
// new log: the failed version's writes (one this mesh does not know
// among them) are given up, the put-back store is the truth, writes go
// on, a view rebuilt from scratch reads the same, and the mark goes.
func TestPutBackStoreBeginsANewLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.db")
	mark := path + ".put-back"
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	hbs := storeWithNodes(t, path, 3, at)
	connect := startBus(t, filepath.Join(dir, "js"))
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	audit := func(v *journal.View, verb string) {
		t.Helper()
		if err := v.Audit(ctx, store.AuditEntry{At: at, Operator: "op", Verb: verb, Args: "{}", Outcome: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	v, stop := running(t, path, connect)
	audit(v, "before")
	stop()
	before := path + ".before-new"
	if err := store.Snapshot(ctx, path, before); err != nil {
		t.Fatal(err)
	}

	v, stop = running(t, path, connect)
	audit(v, "by the failed version")
	heartbeat(t, v, hbs, 3, at)
	stop()
	putWrite(t, js, "w.future", "FromTheFuture", map[string]any{"x": 1})

	if err := os.WriteFile(mark, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := store.Restore(before, path); err != nil {
		t.Fatal(err)
	}
	cfg := journal.Config{PutBackMark: mark}
	v, stop = runningWith(t, path, connect, cfg)
	if _, err := os.Stat(mark); !os.IsNotExist(err) {
		t.Fatalf("the put-back mark is still there: %v", err)
	}
	got, err := v.AuditSince(ctx, time.Time{}, 10)
	if err != nil || len(got) != 1 || got[0].Verb != "before" {
		t.Fatalf("put back, audit = %+v, %v; want the one entry before", got, err)
	}
	audit(v, "after")
	want := reads(t, v)
	stop()
	if names := snapshotNames(t, js, journal.DefaultBucket); len(names) != 1 {
		t.Fatalf("snapshots %v; want the new log's one", names)
	}

	v, stop = runningWith(t, path, connect, cfg)
	if got := reads(t, v); got != want {
		t.Fatalf("restarted, the view answers\n%s\nwant\n%s", got, want)
	}
	stop()
	v, _ = rebuilt(t, filepath.Join(dir, "other.db"), connect, cfg)
	if got := reads(t, v); got != want {
		t.Fatalf("rebuilt from the new log, the view answers\n%s\nwant\n%s", got, want)
	}
}

// A controller restarted more often than it compacts still compacts: the
// entries the log holds when the journal starts count as applied since
// the last compaction.
func TestCompactionCountsTheLogAcrossRestarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	connect := startBus(t, filepath.Join(dir, "js"))
	js, err := connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "mesh.db")
	hbs := storeWithNodes(t, path, 3, at)
	cfg := journal.Config{CompactEntries: 30, CompactEvery: time.Nanosecond}
	v, stop := runningWith(t, path, connect, cfg)
	heartbeat(t, v, hbs, 20, at)
	stop()
	v, _ = runningWith(t, path, connect, cfg)
	heartbeat(t, v, hbs, 15, at.Add(time.Hour))
	poll.Until(t, 30*time.Second, "the log compacted", func() error {
		s := logState(t, js, journal.DefaultBucket)
		if s.Msgs < 30 {
			return nil
		}
		return fmt.Errorf("%d messages", s.Msgs)
	})
}

// A store no journal began a log from (written directly: by genesis, or
// by a mesh that keeps no log, which a fallback puts back without the
// launcher's mark) is the truth when a log of another store is on the
// bus: a new log begins from it, and the other store's entries are not
// applied to it.
func TestStoreNeverAViewBeginsANewLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	connect := startBus(t, filepath.Join(dir, "js"))
	other := filepath.Join(dir, "other.db")
	v, stop := running(t, other, connect)
	if err := v.Audit(ctx, store.AuditEntry{At: at, Operator: "op", Verb: "in the log", Args: "{}", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	stop()

	path := filepath.Join(dir, "mesh.db")
	db, err := store.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Audit(ctx, store.AuditEntry{At: at, Operator: "op", Verb: "written directly", Args: "{}", Outcome: "ok"}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	v, stop = running(t, path, connect)
	got, err := v.AuditSince(ctx, time.Time{}, 10)
	if err != nil || len(got) != 1 || got[0].Verb != "written directly" {
		t.Fatalf("audit = %+v, %v; want only the store's own entry", got, err)
	}
	want := reads(t, v)
	stop()
	v, _ = rebuilt(t, other, connect, journal.Config{})
	if got := reads(t, v); got != want {
		t.Fatalf("rebuilt from the new log, the view answers\n%s\nwant\n%s", got, want)
	}
}
