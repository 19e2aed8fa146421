package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
)

// fileDecl declares a file at p holding content inline.
func fileDecl(p string, mode spec.Mode, content string) spec.Resource {
	b := []byte(content)
	return spec.Resource{
		Name: spec.ResourceName("test", spec.KindFile, p), Kind: spec.KindFile, Module: "test",
		Spec: &spec.FileSpec{Path: p, Mode: mode, Content: b, Size: int64(len(b)), Digest: spec.ContentDigest(b)},
	}
}

// blobDecl declares a file at p whose content travels as a blob.
func blobDecl(p string, mode spec.Mode, content []byte) spec.Resource {
	return spec.Resource{
		Name: spec.ResourceName("test", spec.KindFile, p), Kind: spec.KindFile, Module: "test",
		Spec: &spec.FileSpec{Path: p, Mode: mode, Blob: true, Size: int64(len(content)), Digest: spec.ContentDigest(content)},
	}
}

// fileOf is r's file spec; nil when it has none.
func fileOf(r spec.Resource) *spec.FileSpec { f, _ := spec.As[*spec.FileSpec](r); return f }

// dirOf is r's directory spec; nil when it has none.
func dirOf(r spec.Resource) *spec.DirectorySpec { d, _ := spec.As[*spec.DirectorySpec](r); return d }

// dirDecl declares a directory at p.
func dirDecl(p string, mode spec.Mode) spec.Resource {
	return spec.Resource{
		Name: spec.ResourceName("test", spec.KindDirectory, p), Kind: spec.KindDirectory, Module: "test",
		Spec: &spec.DirectorySpec{Path: p, Mode: mode},
	}
}

// fakeBlobs stands in for the bus: it serves blobs from a map and counts
// the calls.
type fakeBlobs struct {
	mu    sync.Mutex
	blobs map[string][]byte
	err   error
	calls int
}

func (f *fakeBlobs) Fetch(_ context.Context, digest string, _ int64, w io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return f.err
	}
	b, ok := f.blobs[digest]
	if !ok {
		return fmt.Errorf("no blob %s here", digest)
	}
	_, err := w.Write(b)
	return err
}

func (f *fakeBlobs) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// checkOutcomes fails t unless results hold exactly the names of want, each
// with its outcome; a Failed result must say why, any other must not.
func checkOutcomes(t *testing.T, results []spec.ResourceResult, want map[string]string) {
	t.Helper()
	got := make(map[string]spec.ResourceResult, len(results))
	for _, r := range results {
		if _, dup := got[r.Name]; dup {
			t.Errorf("two results for %s", r.Name)
		}
		got[r.Name] = r
	}
	for name, outcome := range want {
		r, ok := got[name]
		switch {
		case !ok:
			t.Errorf("no result for %s", name)
		case r.Outcome != outcome:
			t.Errorf("%s: outcome %s (error %q), want %s", name, r.Outcome, r.Error, outcome)
		case outcome == spec.Failed && r.Error == "":
			t.Errorf("%s: failed without a cause", name)
		case outcome != spec.Failed && r.Error != "":
			t.Errorf("%s: %s with an error %q", name, outcome, r.Error)
		}
	}
	for name, r := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected result %s: %s %q", name, r.Outcome, r.Error)
		}
	}
}

// resultOf is the result named name.
func resultOf(t *testing.T, results []spec.ResourceResult, name string) spec.ResourceResult {
	t.Helper()
	for _, r := range results {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no result for %s in %+v", name, results)
	return spec.ResourceResult{}
}

// allOutcome is want for every resource.
func allOutcome(resources []spec.Resource, outcome string) map[string]string {
	m := make(map[string]string, len(resources))
	for _, r := range resources {
		m[r.Name] = outcome
	}
	return m
}

// lstatOf reads path without following a link.
func lstatOf(t *testing.T, path string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func checkMode(t *testing.T, path string, kind uint32, mode spec.Mode) {
	t.Helper()
	st := lstatOf(t, path)
	if st.Mode&syscall.S_IFMT != kind {
		t.Errorf("%s: type %#o, want %#o", path, st.Mode&syscall.S_IFMT, kind)
	}
	if got := spec.Mode(st.Mode & 0o7777); got != mode {
		t.Errorf("%s: mode %04o, want %04o", path, got, mode)
	}
}

func checkContent(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s holds %q, want %q", path, got, want)
	}
}

func checkAbsent(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s: want nothing there, got %v", path, err)
	}
}

// recordOf is the record entry named name, if any.
func recordOf(record []host.Applied, name string) (host.Applied, bool) {
	for _, a := range record {
		if a.Name == name {
			return a, true
		}
	}
	return host.Applied{}, false
}

// treeSnapshot describes everything under root, metadata (ctime included,
// so a chmod or chown shows) and content.
func treeSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d ino=%d size=%d mtime=%d.%d ctime=%d.%d",
			st.Mode, st.Uid, st.Gid, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		if st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
		}
		snap[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// Invariant 3 at the engine level: a tree is created exactly as declared
// (setuid, setgid and sticky bits included), and the second push of the same
// declaration changes nothing and makes no write.
func TestApplyCreatesTreeThenChangesNothing(t *testing.T) {
	root := t.TempDir()
	e := host.NewEngine(host.Services{Root: root})
	resources := []spec.Resource{
		dirDecl("/etc/app", 0o755),
		dirDecl("/etc/app/secret", 0o700),
		dirDecl("/srv/drop", 0o1777),
		dirDecl("/srv/shared", 0o2750),
		fileDecl("/etc/app/app.conf", 0o644, "listen = 8080\n"),
		fileDecl("/etc/app/secret/key", 0o600, "hunter2\n"),
		fileDecl("/usr/local/bin/tool", 0o4755, "#!/bin/sh\necho tool\n"),
		fileDecl("/etc/app/empty", 0o640, ""),
	}

	results, record, writes := e.Apply(context.Background(), resources, nil)
	checkOutcomes(t, results, allOutcome(resources, spec.Created))
	if writes == 0 {
		t.Error("creating a tree made no writes")
	}
	for _, r := range resources {
		full := filepath.Join(root, r.Target())
		if dirOf(r) != nil {
			checkMode(t, full, syscall.S_IFDIR, dirOf(r).Mode)
			continue
		}
		checkMode(t, full, syscall.S_IFREG, fileOf(r).Mode)
		checkContent(t, full, string(fileOf(r).Content))
	}
	// Parents nobody declared are made 0755 and not recorded.
	checkMode(t, filepath.Join(root, "/usr/local"), syscall.S_IFDIR, 0o755)
	checkMode(t, filepath.Join(root, "/usr/local/bin"), syscall.S_IFDIR, 0o755)
	if len(record) != len(resources) {
		t.Fatalf("record holds %d entries, want %d: %+v", len(record), len(resources), record)
	}
	for _, r := range resources {
		a, ok := recordOf(record, r.Name)
		if !ok || a.Kind != r.Kind || a.Path != r.Target() || a.Digest != r.Digest() {
			t.Errorf("record of %s: %+v (found %v), want kind %s path %s digest %s", r.Name, a, ok, r.Kind, r.Target(), r.Digest())
		}
	}

	before := treeSnapshot(t, root)
	results, record2, writes := e.Apply(context.Background(), resources, record)
	checkOutcomes(t, results, allOutcome(resources, spec.Unchanged))
	if writes != 0 {
		t.Errorf("the second apply of the same declaration made %d writes, want 0", writes)
	}
	if !reflect.DeepEqual(record2, record) {
		t.Errorf("the second apply changed the record:\n%+v\nwant\n%+v", record2, record)
	}
	if after := treeSnapshot(t, root); !reflect.DeepEqual(after, before) {
		t.Errorf("the second apply touched the tree:\n%v\nwant\n%v", after, before)
	}
}

// Reading a directory's mode is exact: 0700 declared 0700 is unchanged, and
// declared 0750 it is one chmod, leaving what it holds alone.
func TestApplyReadsDirectoryModeExactly(t *testing.T) {
	for _, tc := range []struct {
		declared spec.Mode
		outcome  string
		writes   int
	}{
		{0o700, spec.Unchanged, 0},
		{0o750, spec.Changed, 1},
	} {
		t.Run(fmt.Sprintf("%04o", tc.declared), func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			inside := filepath.Join(dir, "db")
			if err := os.WriteFile(inside, []byte("rows"), 0o600); err != nil {
				t.Fatal(err)
			}
			was := lstatOf(t, inside)

			r := dirDecl("/data", tc.declared)
			results, _, writes := host.NewEngine(host.Services{Root: root}).Apply(context.Background(), []spec.Resource{r}, nil)
			checkOutcomes(t, results, map[string]string{r.Name: tc.outcome})
			if writes != tc.writes {
				t.Errorf("%d writes, want %d", writes, tc.writes)
			}
			checkMode(t, dir, syscall.S_IFDIR, tc.declared)
			now := lstatOf(t, inside)
			if now.Ino != was.Ino || now.Ctim != was.Ctim || now.Mtim != was.Mtim {
				t.Errorf("the file inside the directory was touched: %+v, was %+v", now, was)
			}
			checkContent(t, inside, "rows")
		})
	}
}

// Drift on disk is repaired, and only what drifted: content is rewritten,
// a mode is fixed with one chmod and the content (its inode) left alone.
func TestApplyRepairsDrift(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    spec.Mode
		drift   func(t *testing.T, path string)
		rewrite bool // the content must be written anew (a new inode)
		writes  int  // exact count when not rewritten
	}{
		{"content same size", 0o644, func(t *testing.T, p string) { writeInPlace(t, p, "HELLO\n") }, true, 0},
		{"content other size", 0o644, func(t *testing.T, p string) { writeInPlace(t, p, "hello, world\n") }, true, 0},
		{"content emptied", 0o644, func(t *testing.T, p string) { writeInPlace(t, p, "") }, true, 0},
		{"mode", 0o644, func(t *testing.T, p string) { chmodT(t, p, 0o666) }, false, 1},
		{"setuid dropped", 0o4755, func(t *testing.T, p string) { chmodT(t, p, 0o755) }, false, 1},
		{"sticky added", 0o644, func(t *testing.T, p string) { chmodT(t, p, os.ModeSticky|0o644) }, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			e := host.NewEngine(host.Services{Root: root})
			r := fileDecl("/etc/greeting", tc.mode, "hello\n")
			path := filepath.Join(root, "etc/greeting")
			_, record, _ := e.Apply(context.Background(), []spec.Resource{r}, nil)
			tc.drift(t, path)
			was := lstatOf(t, path)

			results, _, writes := e.Apply(context.Background(), []spec.Resource{r}, record)
			checkOutcomes(t, results, map[string]string{r.Name: spec.Changed})
			checkContent(t, path, "hello\n")
			checkMode(t, path, syscall.S_IFREG, tc.mode)
			now := lstatOf(t, path)
			if tc.rewrite {
				if now.Ino == was.Ino {
					t.Error("the content was not replaced by a new file")
				}
				return
			}
			if now.Ino != was.Ino || now.Mtim != was.Mtim {
				t.Error("a mode drift rewrote the content")
			}
			if writes != tc.writes {
				t.Errorf("%d writes, want %d (a chmod)", writes, tc.writes)
			}
		})
	}
}

// writeInPlace overwrites path's content, keeping its inode and mode.
func writeInPlace(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0); err != nil {
		t.Fatal(err)
	}
}

func chmodT(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func TestApplyOwner(t *testing.T) {
	t.Run("own ids and names", applyOwnIDs)
	t.Run("numeric ids and names", func(t *testing.T) {
		needRoot(t, "a chown to other users")
		root := t.TempDir()
		e := host.NewEngine(host.Services{Root: root})
		file := fileDecl("/opt/tool", 0o4755, "#!/bin/sh\n")
		fileOf(file).Owner, fileOf(file).Group = "4242", "4243"
		dir := dirDecl("/opt/data", 0o2750)
		dirOf(dir).Owner = "4242"
		resources := []spec.Resource{file, dir}
		filePath, dirPath := filepath.Join(root, "opt/tool"), filepath.Join(root, "opt/data")

		results, record, _ := e.Apply(context.Background(), resources, nil)
		checkOutcomes(t, results, allOutcome(resources, spec.Created))
		checkOwner(t, filePath, 4242, 4243)
		checkOwner(t, dirPath, 4242, 0)
		// The chown comes before the chmod: a chown clears setuid.
		checkMode(t, filePath, syscall.S_IFREG, 0o4755)
		checkMode(t, dirPath, syscall.S_IFDIR, 0o2750)

		results, record, writes := e.Apply(context.Background(), resources, record)
		checkOutcomes(t, results, allOutcome(resources, spec.Unchanged))
		if writes != 0 {
			t.Errorf("a second apply made %d writes", writes)
		}

		// Back to root: chown (and the chmod it takes) in place.
		ino := lstatOf(t, filePath).Ino
		fileOf(file).Owner, fileOf(file).Group = "0", "0"
		dirOf(dir).Owner, dirOf(dir).Group = "0", "0"
		resources = []spec.Resource{file, dir}
		results, record, _ = e.Apply(context.Background(), resources, record)
		checkOutcomes(t, results, allOutcome(resources, spec.Changed))
		checkOwner(t, filePath, 0, 0)
		checkOwner(t, dirPath, 0, 0)
		checkMode(t, filePath, syscall.S_IFREG, 0o4755)
		checkMode(t, dirPath, syscall.S_IFDIR, 0o2750)
		if lstatOf(t, filePath).Ino != ino {
			t.Error("an owner change rewrote the content")
		}

		// The same ids by name are the same declaration to hold.
		fileOf(file).Owner, fileOf(file).Group = "root", "root"
		dirOf(dir).Owner, dirOf(dir).Group = "root", "root"
		resources = []spec.Resource{file, dir}
		results, _, writes = e.Apply(context.Background(), resources, record)
		checkOutcomes(t, results, allOutcome(resources, spec.Unchanged))
		if writes != 0 {
			t.Errorf("owners by name made %d writes", writes)
		}
	})

	t.Run("unknown names", func(t *testing.T) {
		root := t.TempDir()
		badUser := fileDecl("/etc/a", 0o644, "a")
		fileOf(badUser).Owner = "mesh-no-such-user"
		badGroup := dirDecl("/srv/d", 0o755)
		dirOf(badGroup).Group = "mesh-no-such-group"
		good := fileDecl("/etc/b", 0o644, "b")
		results, record, _ := host.NewEngine(host.Services{Root: root}).Apply(context.Background(), []spec.Resource{badUser, badGroup, good}, nil)
		checkOutcomes(t, results, map[string]string{badUser.Name: spec.Failed, badGroup.Name: spec.Failed, good.Name: spec.Created})
		if err := resultOf(t, results, badUser.Name).Error; !strings.Contains(err, "mesh-no-such-user") {
			t.Errorf("the cause %q does not name the user", err)
		}
		if err := resultOf(t, results, badGroup.Name).Error; !strings.Contains(err, "mesh-no-such-group") {
			t.Errorf("the cause %q does not name the group", err)
		}
		checkAbsent(t, filepath.Join(root, "etc/a"))
		checkAbsent(t, filepath.Join(root, "srv/d"))
		checkContent(t, filepath.Join(root, "etc/b"), "b")
		if a, ok := recordOf(record, badUser.Name); !ok || a.Digest != "" {
			t.Errorf("a failed apply is recorded as %+v (found %v), want an empty digest", a, ok)
		}
	})
}

func checkOwner(t *testing.T, path string, uid, gid uint32) {
	t.Helper()
	st := lstatOf(t, path)
	if st.Uid != uid || st.Gid != gid {
		t.Errorf("%s: owned by %d:%d, want %d:%d", path, st.Uid, st.Gid, uid, gid)
	}
}

// Invariant 5: one failing resource does not stop the others, each failure
// names its cause, and nothing standing in the way is deleted.
func TestApplyOneFailureDoesNotStopOthers(t *testing.T) {
	root := t.TempDir()
	mustWrite := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite("/blocker", "a file, not a directory")
	mustWrite("/is-dir/inside", "kept")
	mustWrite("/is-file", "kept too")
	if err := os.Symlink(filepath.Join(root, "is-dir"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}

	underFile := fileDecl("/blocker/conf", 0o644, "x")
	overDir := fileDecl("/is-dir", 0o644, "x")
	overFile := dirDecl("/is-file", 0o755)
	overLink := dirDecl("/link", 0o755)
	goodDir := dirDecl("/ok", 0o750)
	goodFile := fileDecl("/ok/f", 0o644, "fine")
	goodDeep := fileDecl("/new/deep/g", 0o600, "fine too")
	resources := []spec.Resource{underFile, overDir, overFile, overLink, goodDir, goodFile, goodDeep}

	before := treeSnapshot(t, root)
	results, record, _ := host.NewEngine(host.Services{Root: root}).Apply(context.Background(), resources, nil)
	checkOutcomes(t, results, map[string]string{
		underFile.Name: spec.Failed, overDir.Name: spec.Failed, overFile.Name: spec.Failed, overLink.Name: spec.Failed,
		goodDir.Name: spec.Created, goodFile.Name: spec.Created, goodDeep.Name: spec.Created,
	})
	for name, cause := range map[string]string{
		underFile.Name: "parent " + filepath.Join(root, "blocker") + " of " + filepath.Join(root, "blocker/conf") + " is a regular file, not a directory",
		overDir.Name:   "a directory is at " + filepath.Join(root, "is-dir") + " where a file is declared",
		overFile.Name:  "a regular file is at " + filepath.Join(root, "is-file") + " where a directory is declared",
		overLink.Name:  "a symbolic link is at " + filepath.Join(root, "link") + " where a directory is declared",
	} {
		if err := resultOf(t, results, name).Error; !strings.Contains(err, cause) {
			t.Errorf("%s: cause %q, want it to say %q", name, err, cause)
		}
	}
	after := treeSnapshot(t, root)
	for p, desc := range before {
		if p != root && after[p] != desc {
			t.Errorf("%s was touched: %s, was %s", p, after[p], desc)
		}
	}
	checkContent(t, filepath.Join(root, "ok/f"), "fine")
	checkContent(t, filepath.Join(root, "new/deep/g"), "fine too")
	for _, r := range resources {
		a, ok := recordOf(record, r.Name)
		if !ok {
			t.Errorf("%s is not on record", r.Name)
			continue
		}
		failed := resultOf(t, results, r.Name).Outcome == spec.Failed
		if failed && a.Digest != "" || !failed && a.Digest != r.Digest() {
			t.Errorf("%s recorded with digest %q (failed: %v)", r.Name, a.Digest, failed)
		}
	}

	// Declared no more, the failed ones are removed from the record, and
	// what stood in their way (someone else's) stays as it was.
	good := []spec.Resource{goodDir, goodFile, goodDeep}
	results, record, _ = host.NewEngine(host.Services{Root: root}).Apply(context.Background(), good, record)
	checkOutcomes(t, results, map[string]string{
		underFile.Name: spec.Removed, overDir.Name: spec.Removed, overFile.Name: spec.Removed, overLink.Name: spec.Removed,
		goodDir.Name: spec.Unchanged, goodFile.Name: spec.Unchanged, goodDeep.Name: spec.Unchanged,
	})
	after = treeSnapshot(t, root)
	for p, desc := range before {
		if p != root && after[p] != desc {
			t.Errorf("%s was touched by a removal: %s, was %s", p, after[p], desc)
		}
	}
	if len(record) != len(good) {
		t.Errorf("record %+v, want only the %d applied", record, len(good))
	}
}

// A resource that moves from one module to another (a new name, the same
// kind and path) is handed over: the old name leaves the record, and what
// the new one holds is not deleted.
func TestApplyHandsOverAPathBetweenNames(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	e := host.NewEngine(host.Services{Root: root})
	oldFile, oldDir := fileDecl("/etc/site/x.conf", 0o644, "x"), dirDecl("/etc/site", 0o755)
	_, record, _ := e.Apply(ctx, []spec.Resource{oldDir, oldFile}, nil)

	newFile, newDir := oldFile, oldDir
	newFile.Module, newFile.Name = "other", spec.ResourceName("other", spec.KindFile, "/etc/site/x.conf")
	newDir.Module, newDir.Name = "other", spec.ResourceName("other", spec.KindDirectory, "/etc/site")
	declared := []spec.Resource{newDir, newFile}
	want := map[string]string{newDir.Name: spec.Unchanged, newFile.Name: spec.Unchanged, oldDir.Name: spec.Removed, oldFile.Name: spec.Removed}
	checkOutcomes(t, e.Preview(context.Background(), declared, record), want)
	results, record, writes := e.Apply(ctx, declared, record)
	checkOutcomes(t, results, want)
	if writes != 0 {
		t.Errorf("a hand-over made %d writes", writes)
	}
	checkContent(t, filepath.Join(root, "etc/site/x.conf"), "x")
	if len(record) != 2 || record[0].Name != newDir.Name || record[1].Name != newFile.Name {
		t.Errorf("record %+v, want only the new names", record)
	}
}

// Invariant 5: what is no longer declared is removed, deepest first (a
// directory that still holds what nobody declared: TestDirectoryOnRemove).
func TestApplyRemoves(t *testing.T) {
	ctx := context.Background()
	t.Run("no longer declared", func(t *testing.T) {
		root := t.TempDir()
		e := host.NewEngine(host.Services{Root: root})
		d, f, keep := dirDecl("/d", 0o755), fileDecl("/d/f", 0o644, "f"), fileDecl("/keep", 0o644, "k")
		_, record, _ := e.Apply(ctx, []spec.Resource{d, f, keep}, nil)

		results, record, writes := e.Apply(ctx, []spec.Resource{keep}, record)
		checkOutcomes(t, results, map[string]string{keep.Name: spec.Unchanged, f.Name: spec.Removed, d.Name: spec.Removed})
		want := []string{keep.Name, f.Name, d.Name} // applies, then removals deepest first
		for i, r := range results {
			if r.Name != want[i] {
				t.Errorf("result %d is %s, want %s", i, r.Name, want[i])
			}
			if r.Outcome == spec.Removed && r.Kind != map[string]string{f.Name: spec.KindFile, d.Name: spec.KindDirectory}[r.Name] {
				t.Errorf("removal of %s says kind %q", r.Name, r.Kind)
			}
		}
		if writes != 2 {
			t.Errorf("%d writes, want 2 removals", writes)
		}
		checkAbsent(t, filepath.Join(root, "d"))
		if len(record) != 1 || record[0].Name != keep.Name {
			t.Errorf("record %+v, want only %s", record, keep.Name)
		}
	})

	t.Run("already gone", func(t *testing.T) {
		root := t.TempDir()
		previous := []host.Applied{
			{Name: "test:file:/gone", Kind: spec.KindFile, Path: "/gone", Digest: "sha256:x"},
			{Name: "test:directory:/gone-dir", Kind: spec.KindDirectory, Path: "/gone-dir", Digest: "sha256:y"},
		}
		results, record, writes := host.NewEngine(host.Services{Root: root}).Apply(ctx, nil, previous)
		checkOutcomes(t, results, map[string]string{"test:file:/gone": spec.Removed, "test:directory:/gone-dir": spec.Removed})
		if writes != 0 || len(record) != 0 {
			t.Errorf("%d writes and record %+v, want none", writes, record)
		}
	})
}

// Blobs are fetched only when a file must be written, and verified: bytes
// that are not the declared ones are refused before anything is written.
func TestApplyBlobs(t *testing.T) {
	ctx := context.Background()
	content := bytes.Repeat([]byte("0123456789abcdef"), 8<<10) // 128 KiB: over the inline cap
	r := blobDecl("/srv/blobs/big.bin", 0o644, content)
	digest := fileOf(r).Digest

	t.Run("right bytes", func(t *testing.T) {
		root := t.TempDir()
		blobs := &fakeBlobs{blobs: map[string][]byte{digest: content}}
		e := host.NewEngine(host.Services{Root: root, Blobs: blobs})
		results, record, _ := e.Apply(ctx, []spec.Resource{r}, nil)
		checkOutcomes(t, results, map[string]string{r.Name: spec.Created})
		checkContent(t, filepath.Join(root, "srv/blobs/big.bin"), string(content))
		if blobs.callCount() != 1 {
			t.Fatalf("%d fetches, want 1", blobs.callCount())
		}

		results, record, writes := e.Apply(ctx, []spec.Resource{r}, record)
		checkOutcomes(t, results, map[string]string{r.Name: spec.Unchanged})
		if writes != 0 || blobs.callCount() != 1 {
			t.Errorf("an unchanged blob file made %d writes and %d fetches, want 0 and 1", writes, blobs.callCount())
		}

		chmodT(t, filepath.Join(root, "srv/blobs/big.bin"), 0o600)
		results, _, _ = e.Apply(ctx, []spec.Resource{r}, record)
		checkOutcomes(t, results, map[string]string{r.Name: spec.Changed})
		if blobs.callCount() != 1 {
			t.Errorf("a mode fix fetched the blob (%d fetches)", blobs.callCount())
		}
	})

	// The fetched bytes go to the temporary file as they arrive: bytes
	// found wrong at the end were written, and are taken away with the
	// parents made for them; a fetch that fails before any byte arrives
	// writes nothing at all.
	for _, tc := range []struct {
		name    string
		blobs   *fakeBlobs
		cause   []string
		writes0 bool
	}{
		{"wrong bytes", &fakeBlobs{blobs: map[string][]byte{digest: bytes.ToUpper(content)}}, []string{digest, "digest is sha256:"}, false},
		{"wrong size", &fakeBlobs{blobs: map[string][]byte{digest: content[1:]}}, []string{digest, "131071 bytes"}, false},
		{"fetch fails", &fakeBlobs{err: errors.New("controller unreachable")}, []string{digest, "controller unreachable"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			results, record, writes := host.NewEngine(host.Services{Root: root, Blobs: tc.blobs}).Apply(ctx, []spec.Resource{r}, nil)
			checkOutcomes(t, results, map[string]string{r.Name: spec.Failed})
			for _, part := range tc.cause {
				if err := results[0].Error; !strings.Contains(err, part) {
					t.Errorf("cause %q does not say %q", err, part)
				}
			}
			if tc.writes0 && writes != 0 {
				t.Errorf("%d writes, want none", writes)
			}
			checkAbsent(t, filepath.Join(root, "srv"))
			if a, ok := recordOf(record, r.Name); !ok || a.Digest != "" {
				t.Errorf("recorded as %+v (found %v), want an empty digest", a, ok)
			}
		})
	}
}

// A dry run writes nothing, and says exactly what the apply that follows
// does.
func TestPreviewWritesNothingAndMatchesApply(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	e := host.NewEngine(host.Services{Root: root})
	base := []spec.Resource{
		dirDecl("/a", 0o755),
		fileDecl("/a/one", 0o644, "one"),
		fileDecl("/a/two", 0o644, "two"),
		fileDecl("/old", 0o644, "old"),
		dirDecl("/old-dir", 0o755),
	}
	_, record, _ := e.Apply(ctx, base, nil)
	chmodT(t, filepath.Join(root, "a/two"), 0o600)
	writeInPlace(t, filepath.Join(root, "a/one"), "ONE")

	if err := os.WriteFile(filepath.Join(root, "a/four"), []byte("4"), 0o640); err != nil {
		t.Fatal(err)
	}
	chmodT(t, filepath.Join(root, "a/four"), 0o640)

	next := []spec.Resource{
		dirDecl("/a", 0o700),               // changed: mode
		fileDecl("/a/one", 0o644, "one"),   // changed: content
		fileDecl("/a/two", 0o600, "two"),   // unchanged: 0600 is what is there now
		fileDecl("/a/four", 0o644, "4"),    // changed: mode (0640 there)
		fileDecl("/a/three", 0o644, "3"),   // created
		dirDecl("/b/c", 0o755),             // created, with its parent
		fileDecl("/a/one/x", 0o644, "x"),   // failed: its parent is a file
		fileDecl("/old-dir", 0o644, "dir"), // failed: a directory is there
	} // and /old, /old-dir removed

	before := treeSnapshot(t, root)
	preview := e.Preview(context.Background(), next, record)
	if after := treeSnapshot(t, root); !reflect.DeepEqual(after, before) {
		t.Fatalf("preview touched the tree:\n%v\nwant\n%v", after, before)
	}
	results, _, writes := e.Apply(ctx, next, record)
	if writes == 0 {
		t.Fatal("the apply after the preview made no writes: the test proves nothing")
	}
	if len(preview) != len(results) {
		t.Fatalf("preview has %d results, apply %d:\n%+v\n%+v", len(preview), len(results), preview, results)
	}
	seen := map[string]bool{}
	for i := range results {
		p, a := preview[i], results[i]
		seen[a.Outcome] = true
		if p.Name != a.Name || p.Kind != a.Kind || p.Outcome != a.Outcome || (p.Error == "") != (a.Error == "") {
			t.Errorf("result %d: preview %+v, apply %+v", i, p, a)
		}
	}
	for _, o := range []string{spec.Created, spec.Changed, spec.Unchanged, spec.Removed, spec.Failed} {
		if !seen[o] {
			t.Errorf("no %s outcome: the comparison does not cover it", o)
		}
	}
}

// Invariant 6: a program that had the old file open keeps reading it.
func TestApplyKeepsInodeForOpenReader(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	e := host.NewEngine(host.Services{Root: root})
	path := filepath.Join(root, "etc/prog.conf")
	_, record, _ := e.Apply(ctx, []spec.Resource{fileDecl("/etc/prog.conf", 0o644, "version one\n")}, nil)

	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	results, _, _ := e.Apply(ctx, []spec.Resource{fileDecl("/etc/prog.conf", 0o644, "version two, longer\n")}, record)
	if results[0].Outcome != spec.Changed {
		t.Fatalf("outcome %s %q, want changed", results[0].Outcome, results[0].Error)
	}
	got, err := io.ReadAll(old)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "version one\n" {
		t.Errorf("the open handle reads %q, want the old content", got)
	}
	checkContent(t, path, "version two, longer\n")
	entries, err := os.ReadDir(filepath.Join(root, "etc"))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("temporary files left beside the target: %v", entries)
	}
}

// A malformed resource fails Check and touches nothing.
func TestApplyRefusesMalformed(t *testing.T) {
	ctx := context.Background()
	badDigest := fileDecl("/etc/x", 0o644, "abc")
	fileOf(badDigest).Digest = spec.ContentDigest([]byte("abd"))
	relative := fileDecl("/etc/x", 0o644, "abc")
	fileOf(relative).Path = "etc/x"
	unclean := dirDecl("/srv/../etc", 0o755)
	unknown := dirDecl("/srv/x", 0o755)
	unknown.Kind = "socket"
	noSpec := dirDecl("/srv/y", 0o755)
	noSpec.Kind = spec.KindFile
	for _, tc := range []struct {
		name  string
		r     spec.Resource
		cause string
	}{
		{"inline digest mismatch", badDigest, "does not match its size and digest"},
		{"relative path", relative, "not absolute"},
		{"unclean path", unclean, "not clean"},
		{"unknown kind", unknown, `unknown kind "socket"`},
		{"kind without its spec", noSpec, "needs exactly a file spec"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			e := host.NewEngine(host.Services{Root: root})
			for _, results := range [][]spec.ResourceResult{
				e.Preview(context.Background(), []spec.Resource{tc.r}, nil),
				func() []spec.ResourceResult {
					results, record, writes := e.Apply(ctx, []spec.Resource{tc.r}, nil)
					if writes != 0 || len(record) != 0 {
						t.Errorf("%d writes, record %+v: want none", writes, record)
					}
					return results
				}(),
			} {
				checkOutcomes(t, results, map[string]string{tc.r.Name: spec.Failed})
				if !strings.Contains(results[0].Error, tc.cause) {
					t.Errorf("cause %q, want it to say %q", results[0].Error, tc.cause)
				}
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("something was written: %v", entries)
			}
		})
	}

	t.Run("keeps the earlier record", func(t *testing.T) {
		root := t.TempDir()
		e := host.NewEngine(host.Services{Root: root})
		good := fileDecl("/etc/x", 0o644, "abc")
		_, record, _ := e.Apply(ctx, []spec.Resource{good}, nil)
		results, record, writes := e.Apply(ctx, []spec.Resource{badDigest}, record)
		checkOutcomes(t, results, map[string]string{badDigest.Name: spec.Failed})
		if writes != 0 {
			t.Errorf("%d writes, want none", writes)
		}
		checkContent(t, filepath.Join(root, "etc/x"), "abc")
		if a, ok := recordOf(record, good.Name); !ok || a.Path != "/etc/x" || a.Digest != "" {
			t.Errorf("record %+v (found %v): want the earlier entry kept with an empty digest", a, ok)
		}
	})
}

// Parents are applied first whatever the declared order, so a declared
// directory is created with its own mode rather than as a file's 0755
// parent.
func TestApplyOrdersParentsFirst(t *testing.T) {
	root := t.TempDir()
	f, inner, outer := fileDecl("/p/q/f", 0o644, "f"), dirDecl("/p/q", 0o700), dirDecl("/p", 0o750)
	results, _, _ := host.NewEngine(host.Services{Root: root}).Apply(context.Background(), []spec.Resource{f, inner, outer}, nil)
	want := []string{outer.Name, inner.Name, f.Name}
	for i, r := range results {
		if r.Name != want[i] || r.Outcome != spec.Created {
			t.Errorf("result %d: %s %s %q, want %s created", i, r.Name, r.Outcome, r.Error, want[i])
		}
	}
	checkMode(t, filepath.Join(root, "p"), syscall.S_IFDIR, 0o750)
	checkMode(t, filepath.Join(root, "p/q"), syscall.S_IFDIR, 0o700)
}

// A cancelled apply touches nothing more, says why, and keeps on record
// what it did not get to remove.
func TestApplyCancelled(t *testing.T) {
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	kept := filepath.Join(root, "kept")
	if err := os.WriteFile(kept, []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	previous := []host.Applied{{Name: "test:file:/kept", Kind: spec.KindFile, Path: "/kept", Digest: "sha256:k"}}
	r := fileDecl("/etc/x", 0o644, "x")
	results, record, writes := host.NewEngine(host.Services{Root: root}).Apply(ctx, []spec.Resource{r}, previous)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Failed, previous[0].Name: spec.Failed})
	for _, res := range results {
		if !strings.Contains(res.Error, context.Canceled.Error()) {
			t.Errorf("%s: cause %q, want %q", res.Name, res.Error, context.Canceled)
		}
	}
	if writes != 0 {
		t.Errorf("%d writes after the cancel", writes)
	}
	checkAbsent(t, filepath.Join(root, "etc"))
	checkContent(t, kept, "k")
	if _, ok := recordOf(record, previous[0].Name); !ok {
		t.Errorf("a removal not done left the record: %+v", record)
	}
}

// Modes are exactly what is declared whatever the umask, and parents nobody
// declared are exactly 0755.
func TestApplyIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	root := t.TempDir()
	resources := []spec.Resource{dirDecl("/srv/www", 0o755), fileDecl("/etc/deep/app.conf", 0o644, "x")}
	results, _, _ := host.NewEngine(host.Services{Root: root}).Apply(context.Background(), resources, nil)
	checkOutcomes(t, results, allOutcome(resources, spec.Created))
	checkMode(t, filepath.Join(root, "srv"), syscall.S_IFDIR, 0o755)
	checkMode(t, filepath.Join(root, "srv/www"), syscall.S_IFDIR, 0o755)
	checkMode(t, filepath.Join(root, "etc"), syscall.S_IFDIR, 0o755)
	checkMode(t, filepath.Join(root, "etc/deep"), syscall.S_IFDIR, 0o755)
	checkMode(t, filepath.Join(root, "etc/deep/app.conf"), syscall.S_IFREG, 0o644)
}

// A file whose size differs is not read: a 1 TiB sparse file standing where
// a one-byte file is declared is replaced at once, not hashed first.
func TestApplyDoesNotReadWhenSizesDiffer(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "big")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	err = f.Truncate(1 << 40)
	f.Close()
	if err != nil {
		t.Skipf("no sparse 1 TiB file here: %v", err)
	}
	r := fileDecl("/big", 0o644, "x")
	done := make(chan []spec.ResourceResult, 1)
	go func() {
		results, _, _ := host.NewEngine(host.Services{Root: root}).Apply(context.Background(), []spec.Resource{r}, nil)
		done <- results
	}()
	select {
	case results := <-done:
		checkOutcomes(t, results, map[string]string{r.Name: spec.Changed})
		checkContent(t, path, "x")
	case <-time.After(10 * time.Second):
		t.Fatal("apply is still reading a file whose size alone says it differs")
	}
}
