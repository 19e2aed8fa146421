package host_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
)

// stuckEngine is a container engine that takes every request and never
// answers: a fake, since a real engine cannot be made to hang on demand
// here (and the one engine is shared). It says each request it takes on
// asked.
func stuckEngine(t *testing.T) (*host.Docker, <-chan struct{}) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{}, 64)
	done := make(chan struct{})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				if _, err := c.Read(buf); err == nil {
					select {
					case asked <- struct{}{}:
					default:
					}
				}
				<-done // never answered
			}()
		}
	}()
	t.Cleanup(func() { close(done); l.Close() })
	d, err := host.NewDocker("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, asked
}

// TestStuckEngineLetsGoWhenTheContextEnds: planning a container or the
// network, and removing them, ask the engine under the caller's context:
// on an engine that never answers, a preview and an apply end when their
// context does, each resource failed with the cause, rather than hanging.
func TestStuckEngineLetsGoWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	d, asked := stuckEngine(t)
	e := host.NewEngine(host.Services{Root: t.TempDir(), Docker: d, Node: "alpha", Address: "127.0.0.1", Subnet: host.DefaultSubnet})
	ctr := spec.Resource{Name: "m:container:web", Kind: spec.KindContainer, Module: "m", Spec: &spec.ContainerSpec{Name: "web", Image: "w:1"}}
	declared := []spec.Resource{spec.NodeNetwork("alpha"), ctr}
	previous := []host.Applied{
		{Name: "m:container:old", Kind: spec.KindContainer, Path: "old"},
		{Name: "mesh:network:mesh-alpha", Kind: spec.KindNetwork, Path: "mesh-alpha"},
	}

	for _, pass := range []struct {
		name string
		run  func(ctx context.Context) []spec.ResourceResult
	}{
		{"preview", func(ctx context.Context) []spec.ResourceResult { return e.Preview(ctx, declared, nil) }},
		{"removal", func(ctx context.Context) []spec.ResourceResult {
			results, _, _ := e.Apply(ctx, nil, previous)
			return results
		}},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		out := make(chan []spec.ResourceResult, 1)
		go func() { out <- pass.run(ctx) }()
		select {
		case <-asked:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the engine was never asked", pass.name)
		}
		cancel()
		var results []spec.ResourceResult
		select {
		case results = <-out:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: still waiting on the engine 30 s after its context ended", pass.name)
		}
		if len(results) != 2 {
			t.Fatalf("%s: %d results, want 2: %+v", pass.name, len(results), results)
		}
		for _, r := range results {
			if r.Outcome != spec.Failed || !strings.Contains(r.Error, context.Canceled.Error()) {
				t.Errorf("%s: %s %s %q, want it failed with the context's end", pass.name, r.Name, r.Outcome, r.Error)
			}
		}
	}
}
