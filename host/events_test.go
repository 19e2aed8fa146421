package host_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/mesh-fleet/mesh/spec"
)

// TestDiedContainerIsInspected: the engine still lists a container as
// running for a while after it tells its death. One the host heard died is
// inspected instead of taken from the listing, so a pass right after the
// death starts it again instead of finding it unchanged.
func TestDiedContainerIsInspected(t *testing.T) {
	t.Parallel()
	r := newEngineRig(t)
	ctx := context.Background()
	resources := []spec.Resource{r.network(), r.container(httpd("web"))}
	results, applied, _ := r.engine.Apply(ctx, resources, nil)
	for _, res := range results {
		if res.Outcome != spec.Created {
			t.Fatalf("first apply: %+v", results)
		}
	}
	name := spec.ContainerName(r.node, "web")
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Since replays the engine's log from before the stop: a loaded engine
	// may answer the events request only after the container died, and a
	// stream opened then would never tell it.
	since := strconv.FormatInt(time.Now().Add(-time.Second).Unix(), 10)
	events := r.cli.Events(ectx, client.EventsListOptions{Since: since, Filters: make(client.Filters).
		Add("label", spec.LabelNode+"="+r.node).Add("event", "die")})
	timeout := 5
	stopped := make(chan error, 1)
	go func() {
		_, err := r.cli.ContainerStop(ctx, name, client.ContainerStopOptions{Timeout: &timeout})
		stopped <- err
	}()
	select {
	case <-events.Messages:
	case err := <-events.Err:
		t.Fatalf("engine events: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no die event within 2m of stopping the container")
	}
	r.docker.Died(name) // as the host's event follower does
	results, _, _ = r.engine.Apply(ctx, resources, applied)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	for _, res := range results {
		if res.Name == resources[1].Name && (res.Outcome != spec.Changed || res.Note == "") {
			t.Fatalf("a pass right after web died: %+v, want it started again with a note", res)
		}
	}
	if got, _ := r.inspect("web"); !got.Container.State.Running {
		t.Fatal("web is not running after the pass")
	}
}
