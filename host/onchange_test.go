package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestFileChangeReloadsItsContainer: a file whose content changes sends
// the container its on_change names that signal, or restarts it, and the
// report says so; the container is neither replaced nor touched when the
// file is applied unchanged.
func TestFileChangeReloadsItsContainer(t *testing.T) {
	t.Parallel()
	r := newEngineRig(t)
	ctx := context.Background()
	if err := os.MkdirAll(filepath.Join(r.root, "srv/state"), 0o755); err != nil {
		t.Fatal(err)
	}
	hups := filepath.Join(r.root, "srv/state/hups")
	// A daemon that says each SIGHUP it takes, and each start.
	files := spec.ContainerSpec{Name: "files", Restart: "no",
		Command: []string{"/bin/sh", "-c", `echo start >> /state/starts; trap 'echo hup >> /state/hups' HUP; while true; do sleep 1 & wait $!; done`},
		Mounts:  []spec.MountSpec{{Source: "/srv/state", Target: "/state"}}}
	conf := func(content string, oc spec.OnChange) spec.Resource {
		res := fileDecl("/srv/state/conf", 0o644, content)
		res.Module = "m"
		res.Name = spec.ResourceName("m", spec.KindFile, "/srv/state/conf")
		res.Spec.(*spec.FileSpec).OnChange = &oc
		return res
	}
	hup := spec.OnChange{Container: "files", Signal: "SIGHUP"}
	declared := []spec.Resource{r.network(), conf("v1", hup), r.container(files)}
	results, record, _ := r.engine.Apply(ctx, declared, nil)
	checkOutcomes(t, results, allOutcome(declared, spec.Created))
	poll.Until(t, 30*time.Second, "the container started", func() error {
		b, err := os.ReadFile(filepath.Join(r.root, "srv/state/starts"))
		if err == nil && string(b) == "start\n" {
			return nil
		}
		return errors.New(string(b))
	})
	first, _ := r.inspect("files")

	declared[1] = conf("v2", hup)
	results, record, _ = r.engine.Apply(ctx, declared, record)
	note := noteOf(results, declared[1].Name)
	if !strings.Contains(note, "sent SIGHUP to container "+spec.ContainerName(r.node, "files")) {
		t.Fatalf("the changed file's note %q, want it to say the signal sent", note)
	}
	poll.Until(t, 30*time.Second, "the container took SIGHUP", func() error {
		b, err := os.ReadFile(hups)
		if err == nil && string(b) == "hup\n" {
			return nil
		}
		return errors.New(string(b))
	})

	_, _, writes := r.engine.Apply(ctx, declared, record)
	if writes != 0 {
		t.Fatalf("the same file again: %d writes, want 0 (no signal)", writes)
	}

	declared[1] = conf("v3", spec.OnChange{Container: "files", Restart: true})
	results, _, _ = r.engine.Apply(ctx, declared, record)
	if note := noteOf(results, declared[1].Name); !strings.Contains(note, "restarted container") {
		t.Fatalf("the changed file's note %q, want it to say the restart", note)
	}
	poll.Until(t, 30*time.Second, "the container started again", func() error {
		b, err := os.ReadFile(filepath.Join(r.root, "srv/state/starts"))
		if err == nil && string(b) == "start\nstart\n" {
			return nil
		}
		return errors.New(string(b))
	})
	if again, ok := r.inspect("files"); !ok || again.Container.ID != first.Container.ID {
		t.Fatal("the container was replaced, not restarted")
	}
}

// noteOf is the note of the result named name.
func noteOf(results []spec.ResourceResult, name string) string {
	for _, r := range results {
		if r.Name == name {
			return r.Note + r.Error
		}
	}
	return ""
}
