package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
)

// recorder notes what the parts did, in order.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) note(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// heldPort notes when it is closed.
type heldPort struct {
	r    *recorder
	name string
}

func (h heldPort) Close() error { h.r.note("release " + h.name); return nil }

// fakePart is a part that is ready once it runs (unless it fails), and
// notes its start and its stop.
func fakePart(r *recorder, name string, fail error, held io.Closer) part {
	ready := make(chan struct{})
	return part{name: name, ready: ready, held: held, run: func(ctx context.Context) error {
		r.note("start " + name)
		if fail != nil {
			return fail
		}
		close(ready)
		<-ctx.Done()
		r.note("stop " + name)
		return nil
	}}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Parts start in order, each once the one before is ready, with the
// address each binds released just before it starts; once all are ready
// started runs; when the context ends they stop in reverse.
func TestRunInOrderStartsInOrderAndStopsInReverse(t *testing.T) {
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	parts := []part{
		fakePart(r, "bus", nil, heldPort{r, "bus"}),
		fakePart(r, "resolver", nil, heldPort{r, "dns"}),
		fakePart(r, "host", nil, nil),
	}
	err := runInOrder(ctx, quiet, parts, func() error { r.note("started"); cancel(); return nil })
	if err != nil {
		t.Fatalf("runInOrder: %v", err)
	}
	want := []string{"release bus", "start bus", "release dns", "start resolver", "start host", "started", "stop host", "stop resolver", "stop bus"}
	if got := r.list(); !slices.Equal(got, want) {
		t.Fatalf("events %q\nwant   %q", got, want)
	}
}

// A part that fails to start stops the ones before it, in reverse, starts
// none after it, and its error names it.
func TestRunInOrderStopsWhatRanWhenAPartFails(t *testing.T) {
	r := &recorder{}
	boom := errors.New("address in use")
	parts := []part{fakePart(r, "bus", nil, nil), fakePart(r, "resolver", boom, nil), fakePart(r, "host", nil, nil)}
	err := runInOrder(context.Background(), quiet, parts, func() error { r.note("started"); return nil })
	if !errors.Is(err, boom) || err.Error() != "resolver: address in use" {
		t.Fatalf("runInOrder = %v, want the resolver's failure named", err)
	}
	want := []string{"start bus", "start resolver", "stop bus"}
	if got := r.list(); !slices.Equal(got, want) {
		t.Fatalf("events %q\nwant   %q", got, want)
	}
}

// Held addresses are released when Run ends before their parts start: a
// mesh whose store cannot open keeps no port bound.
func TestMeshReleasesWhatItHeldWhenItCannotStart(t *testing.T) {
	r := &recorder{}
	m, err := NewMesh(MeshConfig{
		Dir: t.TempDir(), Addrs: spec.Addrs{Bus: "127.0.0.1:0", HTTP: "127.0.0.1:0"}, Resolver: resolver.Config{Listen: []string{"127.0.0.1:0"}},
		Held: Held{Bus: heldPort{r, "bus"}, HTTP: heldPort{r, "http"}, DNS: heldPort{r, "dns"}},
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	// The state directory holds no mesh: the store is the first to fail.
	if err := m.Run(context.Background()); err == nil {
		t.Fatal("Run on an empty directory succeeded")
	}
	got := r.list()
	slices.Sort(got)
	if want := []string{"release bus", "release dns", "release http"}; !slices.Equal(got, want) {
		t.Fatalf("released %q, want %q", got, want)
	}
	select {
	case <-m.Ready():
		t.Fatal("Ready closed for a mesh that did not start")
	default:
	}
}
