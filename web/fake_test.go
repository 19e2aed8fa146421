package web

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// fakeSource is a fleet held in memory, changed by the test.
type fakeSource struct {
	mu      sync.Mutex
	status  spec.StatusResult
	nodes   []spec.Node
	audit   []spec.AuditEntry
	grants  []spec.GrantInfo
	overlay spec.OverlayShowResult
	// recorded counts the facts and reports the fleet sent (record).
	recorded uint64
	changes  chan struct{}
}

// newFake is a fleet of n nodes, heard a second ago, all clear.
func newFake(n int, now time.Time) *fakeSource {
	f := &fakeSource{changes: make(chan struct{}, 1)}
	f.status = spec.StatusResult{Time: now, AllClear: true, Versions: map[string][]string{}, Problems: []string{}}
	for i := range n {
		name := fmt.Sprintf("node%04d", i)
		heard := now.Add(-time.Second)
		f.status.Nodes = append(f.status.Nodes, spec.NodeStatus{Node: name, LastHeard: &heard, Heard: "1s ago", State: "current",
			SentSeq: 3, AppliedSeq: 3, HostVersion: "abc123", HeartbeatMS: 1000, Failures: []string{}})
		f.status.Versions["abc123"] = append(f.status.Versions["abc123"], name)
		f.nodes = append(f.nodes, spec.Node{Name: name, Facts: &spec.Facts{Node: name, Arch: "amd64", OS: "linux", Hostname: name}})
	}
	return f
}

func (f *fakeSource) Status(context.Context) (spec.StatusResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, nil
}

func (f *fakeSource) Nodes(context.Context) ([]spec.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes, nil
}

func (f *fakeSource) Node(_ context.Context, name string) (spec.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return spec.Node{}, errNotFound("no node called " + name)
}

func (f *fakeSource) Overlay(context.Context) (spec.OverlayShowResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.overlay, nil
}

func (f *fakeSource) Certs(_ context.Context, node string) ([]spec.IssuedCert, error) {
	return []spec.IssuedCert{{Serial: "01", Node: node, Names: []string{node + ".internal"}, NotAfter: time.Now().Add(48 * time.Hour), Issued: time.Now()}}, nil
}

func (f *fakeSource) Grants(context.Context) ([]spec.GrantInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grants, nil
}

func (f *fakeSource) Modules(context.Context) ([]spec.ModuleInfo, error) {
	return []spec.ModuleInfo{{Name: "web", Version: "1", Resources: 2, Nodes: []string{"node0000"}}}, nil
}

func (f *fakeSource) Audit(context.Context, time.Time) ([]spec.AuditEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.audit, nil
}

func (f *fakeSource) Changes() <-chan struct{} { return f.changes }

func (f *fakeSource) SilentAfter(interval time.Duration) time.Duration {
	return 2*interval + time.Second
}

func (f *fakeSource) Recorded() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.recorded
}

// change changes the fleet and says so.
func (f *fakeSource) change(fn func(*spec.StatusResult, *[]spec.Node)) {
	f.mu.Lock()
	fn(&f.status, &f.nodes)
	f.mu.Unlock()
	f.kick()
}

// record changes the fleet as facts or a report recorded do, and says so.
func (f *fakeSource) record(fn func(*spec.StatusResult, *[]spec.Node)) {
	f.mu.Lock()
	f.recorded++
	f.mu.Unlock()
	f.change(fn)
}

func (f *fakeSource) kick() {
	select {
	case f.changes <- struct{}{}:
	default:
	}
}

// newPages is the pages of src.
func newPages(t testing.TB, src Source) *Pages {
	t.Helper()
	p, err := New(src, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
