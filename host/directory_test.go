package host_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
)

// dirDeleting declares a directory at p whose removal deletes what it holds.
func dirDeleting(p string) spec.Resource {
	r := dirDecl(p, 0o755)
	dirOf(r).OnRemove = spec.OnRemoveDelete
	return r
}

// TestDirectoryOnRemove: a directory no longer declared that holds what
// nothing declared (as a container writes into its mount) is left in place
// with it by default, which is a removal with a note and goes off record,
// not a failure tried again for ever; with on_remove delete it goes with
// everything in it, links inside removed and not followed. Delete never
// takes a path still declared, never reaches past the root through a link,
// and never goes into a file system mounted inside: those stay, failed
// with the reason, on record to be tried again.
func TestDirectoryOnRemove(t *testing.T) {
	ctx := context.Background()
	t.Run("keep", func(t *testing.T) {
		root := t.TempDir()
		e := host.NewEngine(host.Services{Root: root})
		d, f := dirDecl("/d", 0o755), fileDecl("/d/f", 0o644, "f")
		_, record, _ := e.Apply(ctx, []spec.Resource{d, f}, nil)
		stray := filepath.Join(root, "d", "stray")
		if err := os.WriteFile(stray, []byte("someone's data"), 0o644); err != nil {
			t.Fatal(err)
		}

		results, record, writes := e.Apply(ctx, nil, record)
		checkOutcomes(t, results, map[string]string{f.Name: spec.Removed, d.Name: spec.Removed})
		note := resultOf(t, results, d.Name).Note
		for _, part := range []string{"left in place", "1 entry", "stray", "keep"} {
			if !strings.Contains(note, part) {
				t.Errorf("note %q does not say %q", note, part)
			}
		}
		checkContent(t, stray, "someone's data")
		checkAbsent(t, filepath.Join(root, "d/f"))
		if writes != 1 {
			t.Errorf("%d writes, want 1 (the file's removal)", writes)
		}
		if len(record) != 0 {
			t.Errorf("record %+v, want empty: the directory is no longer managed", record)
		}
		// Nothing is tried again.
		results, _, writes = e.Apply(ctx, nil, record)
		if len(results) != 0 || writes != 0 {
			t.Errorf("the next apply: %+v, %d writes, want nothing", results, writes)
		}
	})

	t.Run("delete", func(t *testing.T) {
		root, outside := t.TempDir(), t.TempDir()
		e := host.NewEngine(host.Services{Root: root})
		d, f := dirDeleting("/d"), fileDecl("/d/f", 0o644, "f")
		_, record, _ := e.Apply(ctx, []spec.Resource{d, f}, nil)
		if record[0].OnRemove != spec.OnRemoveDelete {
			t.Fatalf("record %+v does not keep on_remove", record[0])
		}
		precious := filepath.Join(outside, "precious")
		os.WriteFile(precious, []byte("not the mesh's"), 0o644)
		os.MkdirAll(filepath.Join(root, "d/cache/deep"), 0o700)
		os.WriteFile(filepath.Join(root, "d/cache/deep/x"), []byte("x"), 0o600)
		os.Symlink(outside, filepath.Join(root, "d/out"))
		os.Symlink(precious, filepath.Join(root, "d/cache/p"))

		results, record, _ := e.Apply(ctx, nil, record)
		checkOutcomes(t, results, map[string]string{f.Name: spec.Removed, d.Name: spec.Removed})
		if res := resultOf(t, results, d.Name); res.Note != "" {
			t.Errorf("note %q, want none", res.Note)
		}
		checkAbsent(t, filepath.Join(root, "d"))
		checkContent(t, precious, "not the mesh's")
		if len(record) != 0 {
			t.Errorf("record %+v, want empty", record)
		}
	})

	t.Run("delete spares what is declared", func(t *testing.T) {
		root := t.TempDir()
		e := host.NewEngine(host.Services{Root: root})
		d, f := dirDeleting("/d"), fileDecl("/d/other/f", 0o644, "another module's")
		_, record, _ := e.Apply(ctx, []spec.Resource{d, f}, nil)
		os.WriteFile(filepath.Join(root, "d/stray"), []byte("s"), 0o644)

		results, record, _ := e.Apply(ctx, []spec.Resource{f}, record)
		checkOutcomes(t, results, map[string]string{f.Name: spec.Unchanged, d.Name: spec.Failed})
		if cause := resultOf(t, results, d.Name).Error; !strings.Contains(cause, "/d/other/f in it is still declared") {
			t.Errorf("cause %q does not name the path still declared", cause)
		}
		checkContent(t, filepath.Join(root, "d/other/f"), "another module's")
		checkContent(t, filepath.Join(root, "d/stray"), "s")
		if len(record) != 2 {
			t.Errorf("record %+v, want the file and the directory (tried again)", record)
		}
	})

	t.Run("delete stays under the root", func(t *testing.T) {
		root, outside := t.TempDir(), t.TempDir()
		os.MkdirAll(filepath.Join(outside, "d"), 0o755)
		os.WriteFile(filepath.Join(outside, "d/precious"), []byte("p"), 0o644)
		if err := os.Symlink(outside, filepath.Join(root, "srv")); err != nil {
			t.Fatal(err)
		}
		previous := []host.Applied{{Name: "test:directory:/srv/d", Kind: spec.KindDirectory, Path: "/srv/d", Digest: "sha256:x", OnRemove: spec.OnRemoveDelete}}
		results, record, writes := host.NewEngine(host.Services{Root: root}).Apply(ctx, nil, previous)
		res := resultOf(t, results, previous[0].Name)
		if res.Outcome != spec.Failed || !strings.Contains(res.Error, "outside the root") {
			t.Errorf("a directory reached through a link out of the root: %+v, want failed saying so", res)
		}
		checkContent(t, filepath.Join(outside, "d/precious"), "p")
		if writes != 0 || len(record) != 1 {
			t.Errorf("%d writes, record %+v: want none, and the directory on record", writes, record)
		}
	})

	t.Run("delete stays on its file system", func(t *testing.T) {
		root := t.TempDir()
		e := host.NewEngine(host.Services{Root: root})
		d := dirDeleting("/d")
		_, record, _ := e.Apply(ctx, []spec.Resource{d}, nil)
		mnt := filepath.Join(root, "d/mnt")
		os.Mkdir(mnt, 0o755)
		needRoot(t, "mounting a tmpfs")
		if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount a tmpfs: %v", err)
		}
		t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
		os.WriteFile(filepath.Join(mnt, "data"), []byte("on another file system"), 0o644)

		results, record, _ := e.Apply(ctx, nil, record)
		res := resultOf(t, results, d.Name)
		if res.Outcome != spec.Failed || !strings.Contains(res.Error, "mounted at "+mnt) {
			t.Errorf("a directory with a file system mounted in it: %+v, want failed naming the mount", res)
		}
		checkContent(t, filepath.Join(mnt, "data"), "on another file system")
		if len(record) != 1 {
			t.Errorf("record %+v, want the directory (tried again)", record)
		}
	})
}
