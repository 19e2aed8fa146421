package host_test

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
)

// drift changes /f under the host's root and waits for the reconcile pass
// that puts it back (the bench reconciles often).
func (b *bench) drift(seq uint64) {
	b.t.Helper()
	if err := os.WriteFile(filepath.Join(b.root, "f"), []byte("drift"), 0o644); err != nil {
		b.t.Fatal(err)
	}
	if r := b.report(); r.Seq != seq || !r.Reconcile || len(r.Results) != 1 || r.Results[0].Outcome != spec.Changed {
		b.t.Fatalf("after drift: %+v, want a reconcile of %d changing /f", r, seq)
	}
}

// TestStateWrittenOncePerDelivery: state.json is written when what the host
// must never forget changes, and only then. A delivery is written once,
// kept before it is acked or applied (invariant 4); its apply writes the
// record again only when the record changed, so a delivery that changes
// nothing costs one write; a duplicate, a refusal and a reconcile pass that
// leaves the record as it was write nothing; a stop writes the applied
// sequence an apply left unwritten, and a start after a crash that lost it
// applies the kept declaration again.
func TestStateWrittenOncePerDelivery(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.reconcile = 100 * time.Millisecond
	var writes *atomic.Int64
	// Where the last write came from, for a count that is not the one
	// wanted.
	var (
		mu        sync.Mutex
		lastStack []byte
	)
	b.prepare = func(a *host.Agent) {
		writes = host.CountStateWrites(a, func(int64) error {
			mu.Lock()
			lastStack = debug.Stack()
			mu.Unlock()
			return nil
		})
	}
	wroteFrom := func() string {
		mu.Lock()
		defer mu.Unlock()
		return string(lastStack)
	}
	b.start()
	step := func(what string, want int64, do func()) {
		t.Helper()
		before := writes.Load()
		do()
		if got := writes.Load() - before; got != want {
			t.Fatalf("%s: %d state.json writes, want %d; the last from:\n%s", what, got, want, wroteFrom())
		}
	}
	state := func() host.State {
		t.Helper()
		st, _, err := host.ReadState(b.hostDir)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	deliver := func(raw []byte, seq uint64) {
		t.Helper()
		b.publish(raw, nil)
		if r := b.report(); r.Seq != seq || r.Refused != "" || r.Reconcile {
			t.Fatalf("delivery %d: %+v", seq, r)
		}
	}

	one := encode(t, b.declaration(1, fileResource("/f", "one")))
	step("a delivery that creates /f (kept, then its new record)", 2, func() { deliver(one, 1) })
	two := encode(t, b.declaration(2, fileResource("/f", "one")))
	step("a delivery that changes nothing (kept)", 1, func() { deliver(two, 2) })
	if st := state(); st.Seq != 2 || st.AppliedSeq != 1 || len(st.Applied) != 1 {
		t.Fatalf("state.json after it: kept %d, applied %d, %d on record; want 2, 1 (not written alone) and 1", st.Seq, st.AppliedSeq, len(st.Applied))
	}
	step("a duplicate, then a lower sequence refused", 0, func() {
		b.publish(two, nil)
		b.publish(one, nil)
		if r := b.report(); r.Seq != 1 || r.Refused == "" {
			t.Fatalf("the lower sequence: %+v", r)
		}
	})
	step("reconcile passes that correct drift", 0, func() {
		b.drift(2)
		b.drift(2)
	})
	step("a stop", 1, b.stop)
	if st := state(); st.Seq != 2 || st.AppliedSeq != 2 {
		t.Fatalf("state.json after the stop: kept %d, applied %d; want 2 and 2", st.Seq, st.AppliedSeq)
	}

	// A crash after the second delivery would have left applied 1 on
	// disk: the start applies the kept 2 again and reports it.
	st := state()
	st.AppliedSeq = 1
	if err := host.WriteState(b.hostDir, st); err != nil {
		t.Fatal(err)
	}
	b.start() // a new agent, counted from zero
	if r := b.report(); r.Seq != 2 || !r.Reconcile || len(r.Results) != 1 || r.Results[0].Outcome != spec.Unchanged {
		t.Fatalf("the start after the crash reported %+v, want a reconcile of 2, unchanged", r)
	}
	if n := writes.Load(); n != 0 {
		t.Fatalf("the start after the crash: %d state.json writes, want 0; the last from:\n%s", n, wroteFrom())
	}
	step("its stop", 1, b.stop)
	if st := state(); st.AppliedSeq != 2 {
		t.Fatalf("applied %d after the start and stop, want 2", st.AppliedSeq)
	}
}

// TestDeclarationDecodedOnce: a delivery is decoded once, on receipt; the
// reconcile passes after it use the declaration kept decoded.
func TestDeclarationDecodedOnce(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.reconcile = 100 * time.Millisecond
	var decodes *atomic.Int64
	b.prepare = func(a *host.Agent) { decodes = host.CountDecodes(a) }
	b.start()
	b.publish(encode(t, b.declaration(1, fileResource("/f", "one"))), nil)
	if r := b.report(); r.Seq != 1 || r.Refused != "" {
		t.Fatalf("delivery: %+v", r)
	}
	if n := decodes.Load(); n != 1 {
		t.Fatalf("one delivery was decoded %d times", n)
	}
	b.drift(1)
	b.drift(1)
	if n := decodes.Load(); n != 1 {
		t.Fatalf("after two reconcile passes: %d decodes, want the delivery's one", n)
	}
	b.publish(encode(t, b.declaration(2, fileResource("/f", "two"))), nil)
	if r := b.report(); r.Seq != 2 || r.Refused != "" {
		t.Fatalf("the next delivery: %+v", r)
	}
	if got, _ := os.ReadFile(filepath.Join(b.root, "f")); string(got) != "two" || decodes.Load() != 2 {
		t.Fatalf("after the next delivery /f holds %q and %d decodes were made, want two and 2", got, decodes.Load())
	}
}
