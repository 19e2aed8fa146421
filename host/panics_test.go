package host_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
)

// panicky is an applier that panics for one resource and hands the rest to
// the real one: the seam where a bug in an applier is injected.
type panicky struct {
	host.Applier
	name string
}

func (p panicky) Plan(ctx context.Context, r spec.Resource) (host.Result, error) {
	if r.Name == p.name {
		panic("injected: plan")
	}
	return p.Applier.Plan(ctx, r)
}

func (p panicky) Apply(ctx context.Context, r spec.Resource, w *host.Writes) (host.Result, error) {
	if r.Name == p.name {
		panic("injected: apply")
	}
	return p.Applier.Apply(ctx, r, w)
}

func (p panicky) Remove(ctx context.Context, a host.Applied, held []string, w *host.Writes) (host.Result, error) {
	if a.Name == p.name {
		panic("injected: remove")
	}
	return p.Applier.Remove(ctx, a, held, w)
}

// TestPanicInAnApplierFailsThatResourceOnly: a panic while applying,
// planning or removing one resource is that resource's failure, named, and
// heard of with its stack; the other resources are applied.
func TestPanicInAnApplierFailsThatResourceOnly(t *testing.T) {
	root := t.TempDir()
	bad, good := fileDecl("/etc/bad", 0o644, "x"), fileDecl("/etc/good", 0o644, "y")
	e := host.NewEngine(host.Services{Root: root})
	e.Appliers[spec.KindFile] = panicky{Applier: e.Appliers[spec.KindFile], name: bad.Name}
	var heard []string
	e.Panicked = func(what string, v any, stack []byte) {
		if len(stack) == 0 {
			t.Errorf("panic in %s heard without its stack", what)
		}
		heard = append(heard, what)
	}

	results, record, _ := e.Apply(context.Background(), []spec.Resource{bad, good}, nil)
	if r := resultOf(t, results, bad.Name); r.Outcome != spec.Failed || !strings.Contains(r.Error, "internal error (injected: apply)") {
		t.Fatalf("the resource whose apply panicked: %+v", r)
	}
	if r := resultOf(t, results, good.Name); r.Outcome != spec.Created {
		t.Fatalf("the other resource: %+v", r)
	}
	checkContent(t, filepath.Join(root, "etc/good"), "y")

	preview := e.Preview(context.Background(), []spec.Resource{bad, good}, record)
	if r := resultOf(t, preview, bad.Name); r.Outcome != spec.Failed || !strings.Contains(r.Error, "injected: plan") {
		t.Fatalf("the resource whose plan panicked: %+v", r)
	}

	// Removing both (the failed one is on record: it may have written
	// something): the one whose removal panics fails and stays on record;
	// the other goes.
	results, record, _ = e.Apply(context.Background(), nil, record)
	if r := resultOf(t, results, bad.Name); r.Outcome != spec.Failed || !strings.Contains(r.Error, "injected: remove") {
		t.Fatalf("the resource whose removal panicked: %+v", r)
	}
	if _, ok := recordOf(record, bad.Name); !ok {
		t.Fatal("a removal that panicked was dropped from the record: it would never be tried again")
	}
	checkAbsent(t, filepath.Join(root, "etc/good"))
	if want := []string{"apply " + bad.Name, "plan " + bad.Name, "remove " + bad.Name}; strings.Join(heard, ",") != strings.Join(want, ",") {
		t.Fatalf("panics heard: %v, want %v", heard, want)
	}
}

// panickyNames is a real resolver whose SetZone panics the first times:
// the seam where a bug in a pass of the agent's loop (serving the names of
// a roster it took) is injected.
type panickyNames struct {
	*resolver.Server
	left *atomic.Int32
}

func (n panickyNames) SetZone(z resolver.Zone) {
	if n.left.Add(-1) >= 0 {
		panic("injected: names")
	}
	n.Server.SetZone(z)
}

// TestPanicInTheAgentsLoopLeavesItRunning: a panic in a pass of the agent's
// loop (here serving the names of a roster just taken) is recovered and
// counted, and the loop goes on: the next roster is served. Without the
// recovery the panic ends the process, and on a controller's machine the
// bus with it.
func TestPanicInTheAgentsLoopLeavesItRunning(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	names := runResolver(t, resolver.Zone{})
	left := &atomic.Int32{}
	left.Store(1)
	b.names = panickyNames{Server: names, left: left}
	b.panics = new(atomic.Uint64)
	b.start()
	b.publishRoster(encodeRoster(t, rosterDoc(5, "10.1.0.5")), nil)
	poll.Until(t, 20*time.Second, "the panic serving roster 5 is recovered and counted", func() error {
		if b.panics.Load() == 1 {
			return nil
		}
		return fmt.Errorf("%d panics", b.panics.Load())
	})
	// Roster 5's delivery, cut short, is not answered (the stream gives it
	// again later); roster 6 is taken and served meanwhile.
	b.publishRoster(encodeRoster(t, rosterDoc(6, "10.1.0.6")), nil)
	servesWeb(t, names, "10.1.0.6")
	if !strings.Contains(b.logs.String(), "panic recovered; the host goes on") {
		t.Errorf("the recovered panic was not logged:\n%s", b.logs.String())
	}
}
