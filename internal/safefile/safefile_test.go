package safefile_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mesh-fleet/mesh/internal/safefile"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatalf("no Stat_t for %s", path)
	}
	return st.Ino
}

// Invariant 6: a write replaces the file whole, and a program that opened the
// old file keeps reading the old inode.
func TestWriteFileAtomic(t *testing.T) {
	for _, mode := range []os.FileMode{0o600, 0o644, 0o755} {
		t.Run(mode.String(), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "prog")
			v1 := []byte("version one\n")
			v2 := []byte("version two, longer than the first\n")

			if err := safefile.WriteFile(path, v1, mode); err != nil {
				t.Fatalf("write v1: %v", err)
			}
			kept, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer kept.Close()
			ino1 := inode(t, path)

			if err := safefile.WriteFile(path, v2, mode); err != nil {
				t.Fatalf("write v2: %v", err)
			}
			old, err := io.ReadAll(io.NewSectionReader(kept, 0, 1<<20))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(old, v1) {
				t.Errorf("the kept handle reads %q, want the old content %q", old, v1)
			}
			now, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(now, v2) {
				t.Errorf("path reads %q, want %q", now, v2)
			}
			if ino2 := inode(t, path); ino2 == ino1 {
				t.Errorf("path kept inode %d: the file was rewritten in place", ino1)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != mode {
				t.Errorf("mode = %v, want %v", fi.Mode().Perm(), mode)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != 1 || entries[0].Name() != "prog" {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Errorf("directory holds %v, want only prog (no temporary file left)", names)
			}
		})
	}
}

func TestWriteFileAtomicChangesMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := safefile.WriteFile(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := safefile.WriteFile(path, []byte("b"), 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v after rewriting 0600 over 0644", fi.Mode().Perm())
	}
}

func TestWriteFileAtomicFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	// The target is a directory: rename fails, and the temporary file goes.
	target := filepath.Join(dir, "sub")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := safefile.WriteFile(target, []byte("data"), 0o644); err == nil {
		t.Fatal("WriteFile over a non-empty directory succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("after a failed write the directory holds %v, want only sub", names)
	}
}
