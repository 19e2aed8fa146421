package host_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/mesh-fleet/mesh/internal/dockertest"
	"github.com/mesh-fleet/mesh/spec"
)

// imageLoads is how many times the engine loaded image id between since
// and now (its events of type image, action load). The loads counted are
// those of calls that have returned: the engine records a load's event
// before it answers, so the events up to now hold them all, and an until
// in the past has the engine answer at once instead of streaming up to it.
func imageLoads(t *testing.T, cli *client.Client, since time.Time, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := cli.Events(ctx, client.EventsListOptions{
		Since:   strconv.FormatInt(since.Unix()-1, 10),
		Until:   engineTime(time.Now()),
		Filters: make(client.Filters).Add("type", "image").Add("event", "load"),
	})
	n := 0
	for {
		select {
		case msg, ok := <-res.Messages:
			if !ok {
				return n
			}
			// Only id's: another package's tests may load images of their own
			// meanwhile (go test runs packages at once).
			if msg.TimeNano >= since.UnixNano() && msg.Actor.ID == id {
				n++
			}
		case err := <-res.Err:
			if err != nil && !errors.Is(err, io.EOF) {
				t.Fatalf("docker events: %v", err)
			}
			return n
		}
	}
}

// engineTime is t as the engine's events take a time: seconds and
// nanoseconds since the epoch.
func engineTime(t time.Time) string {
	return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond())
}

// TestArchiveLoadedOnlyWhenImageDiffers: a container's image archive is
// loaded when the engine lacks the image; a container made again from it
// (its spec changed, so it is replaced) loads nothing, and does not fetch
// the archive again; when the tag names
// another image, the archive is loaded again and the container runs the
// archive's image.
func TestArchiveLoadedOnlyWhenImageDiffers(t *testing.T) {
	t.Parallel()
	r := newEngineRigOwnImage(t)
	ctx := context.Background()
	archive := filepath.Join(t.TempDir(), "image.tar")
	dockertest.Save(t, r.cli, r.image, archive)
	built, err := r.cli.ImageInspect(ctx, r.image)
	if err != nil {
		t.Fatal(err)
	}
	dockertest.Remove(t, r.cli, r.image)
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	r.blobs.blobs[spec.ContentDigest(data)] = data
	web := httpd("web")
	web.Archive = &spec.ImageArchive{Size: int64(len(data)), Digest: spec.ContentDigest(data)}
	imageOf := func() string {
		t.Helper()
		got, ok := r.inspect("web")
		if !ok || !got.Container.State.Running {
			t.Fatal("container web is not running")
		}
		return got.Container.Image
	}

	since := time.Now()
	declared := []spec.Resource{r.network(), r.container(web)}
	results, record, _ := r.engine.Apply(ctx, declared, nil)
	checkOutcomes(t, results, allOutcome(declared, spec.Created))
	if n := imageLoads(t, r.cli, since, built.ID); n != 1 {
		t.Errorf("the engine lacking the image: %d image loads, want 1", n)
	}
	if got := imageOf(); got != built.ID {
		t.Errorf("container web runs image %s, want the archive's %s", got, built.ID)
	}

	// Replaced for a spec change: the engine holds the archive's image, so
	// the archive is neither loaded nor even fetched again.
	for i, greeting := range []string{"hello", "hi"} {
		since = time.Now()
		fetched := r.blobs.calls
		web.Env = map[string]string{"GREETING": greeting}
		declared = []spec.Resource{r.network(), r.container(web)}
		results, record, _ = r.engine.Apply(ctx, declared, record)
		checkOutcomes(t, results, map[string]string{declared[0].Name: spec.Unchanged, declared[1].Name: spec.Changed})
		if n := imageLoads(t, r.cli, since, built.ID); n != 0 {
			t.Errorf("replacement %d, the engine holding the archive's image: %d image loads, want none", i+1, n)
		}
		if n := r.blobs.calls - fetched; n != 0 {
			t.Errorf("replacement %d fetched the archive %d times, want none", i+1, n)
		}
	}

	// The tag now names another image: the archive is loaded again.
	dockertest.Build(t, r.cli, r.image, map[string]string{"/www/index.html": "another image\n"})
	t.Cleanup(func() { dockertest.RemoveNode(r.cli, r.node) }) // before the images: see TestArchiveIsSpooledNotHeld
	other, err := r.cli.ImageInspect(ctx, r.image)
	if err != nil || other.ID == built.ID {
		t.Fatalf("rebuilt %s: %v, ID %s (the archive's is %s)", r.image, err, other.ID, built.ID)
	}
	t.Cleanup(func() { r.cli.ImageRemove(context.Background(), other.ID, client.ImageRemoveOptions{Force: true}) })
	since = time.Now()
	web.Env = map[string]string{"GREETING": "hey"}
	declared = []spec.Resource{r.network(), r.container(web)}
	results, _, _ = r.engine.Apply(ctx, declared, record)
	checkOutcomes(t, results, map[string]string{declared[0].Name: spec.Unchanged, declared[1].Name: spec.Changed})
	if n := imageLoads(t, r.cli, since, built.ID); n != 1 {
		t.Errorf("the tag naming another image: %d image loads, want 1", n)
	}
	if got := imageOf(); got != built.ID {
		t.Errorf("container web runs image %s, want the archive's %s", got, built.ID)
	}
}

// aloneInProcess marks a test's run in a process of its own (the test
// binary run again for that one test), where what the process allocates is
// the test's alone.
const aloneInProcess = "MESH_TEST_ALONE_IN_PROCESS"

// TestArchiveIsSpooledNotHeld: a container's 24 MiB image archive is
// fetched to a file and loaded from it, so applying it allocates a small
// part of its size in this process (held whole, it allocated all of it).
// The figure is the process's: the test runs again alone in a process of
// its own, so that it can run in parallel with the others here (a test
// that is not parallel holds every parallel one back until it ends).
func TestArchiveIsSpooledNotHeld(t *testing.T) {
	if os.Getenv(aloneInProcess) != "1" {
		t.Parallel()
		dockertest.Client(t) // skips without MESH_TEST_DOCKER=1
		cmd := exec.Command(os.Args[0], "-test.run", "^TestArchiveIsSpooledNotHeld$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), aloneInProcess+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestArchiveIsSpooledNotHeld") {
			t.Fatalf("the test alone in its own process: %v\n%s", err, out)
		}
		t.Logf("alone in its own process:\n%s", out)
		return
	}
	r := newEngineRigOwnImage(t)
	ctx := context.Background()
	const size = 24 << 20
	tag := "mesh-test/big-" + r.node + ":1"
	big := make([]byte, size)
	for i := range big {
		big[i] = byte(i * 7919 >> 8)
	}
	dockertest.Build(t, r.cli, tag, map[string]string{"/big.bin": string(big), "/www/index.html": "big\n"})
	// The container goes before its image (cleanups run last first): an
	// image removed while a container uses it stays, untagged.
	t.Cleanup(func() { dockertest.RemoveNode(r.cli, r.node) })
	archive := filepath.Join(t.TempDir(), "image.tar")
	dockertest.Save(t, r.cli, tag, archive)
	dockertest.Remove(t, r.cli, tag)
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	r.blobs.blobs[spec.ContentDigest(data)] = data
	web := httpd("web")
	web.Image = tag
	web.Archive = &spec.ImageArchive{Size: int64(len(data)), Digest: spec.ContentDigest(data)}
	declared := []spec.Resource{r.network(), r.container(web)}

	big = nil
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	results, _, _ := r.engine.Apply(ctx, declared, nil)
	runtime.ReadMemStats(&after)
	checkOutcomes(t, results, allOutcome(declared, spec.Created))
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("applying a container from a %d MiB archive allocated %.1f MiB", len(data)>>20, float64(alloc)/(1<<20))
	if alloc > size/4 {
		t.Errorf("applying a container from a %d MiB archive allocated %d MiB: the archive is held, not spooled", len(data)>>20, alloc>>20)
	}
}
