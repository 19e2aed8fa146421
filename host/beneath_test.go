package host_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/dockertest"
	"github.com/mesh-fleet/mesh/spec"
)

// outsideSnapshot describes everything under dir except what lies under
// skip (the root, which the host may change): names, kinds, modes, owners,
// inodes, times (a chmod or chown changes ctime even to the same value),
// content and link targets. Nothing is followed.
func outsideSnapshot(t testing.TB, dir, skip string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == skip {
			return filepath.SkipDir
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d ino=%d size=%d mtime=%d.%d ctime=%d.%d",
			st.Mode, st.Uid, st.Gid, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256=%x", sha256.Sum256(b))
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		snap[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// checkUnchanged fails t when the snapshot differs, naming each path.
func checkUnchanged(t testing.TB, before, after map[string]string) {
	t.Helper()
	if reflect.DeepEqual(before, after) {
		return
	}
	for p, was := range before {
		if now, ok := after[p]; !ok {
			t.Errorf("outside the root, %s is gone (was %s)", p, was)
		} else if now != was {
			t.Errorf("outside the root, %s changed: %s, was %s", p, now, was)
		}
	}
	for p, now := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("outside the root, %s appeared: %s", p, now)
		}
	}
}

// linkedRoot is a root and, beside it, a directory outside it holding a
// file x (0644, "theirs"), a directory d (0755) and, in d, a file y.
func linkedRoot(t *testing.T) (base, root, outside string) {
	t.Helper()
	base = t.TempDir()
	root, outside = filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{root, filepath.Join(outside, "d")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"x": "theirs", "d/y": "theirs too"} {
		if err := os.WriteFile(filepath.Join(outside, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return base, root, outside
}

// A path that lies through a link leading out of the root fails that
// resource, in apply and in preview alike, naming the path and the link;
// nothing outside the root is created, written, chmodded or chowned, and
// the other resources are applied. A link that stays in the root
// (relative, or absolute to a place under it) is followed.
func TestApplyDoesNotFollowLinksOutOfTheRoot(t *testing.T) {
	t.Parallel()
	owned := func(r spec.Resource) spec.Resource {
		if fileOf(r) != nil {
			fileOf(r).Owner, fileOf(r).Group = "4242", "4243"
		} else {
			dirOf(r).Owner = "4242"
		}
		return r
	}
	for _, tc := range []struct {
		name   string
		link   string // the link's target; OUT is the outside directory, BASE their parent
		decl   spec.Resource
		linkAt string // where the link is, under the root
		root   bool   // the chown case needs root
	}{
		{"create a file", "OUT", fileDecl("/link/new", 0o644, "mine"), "/link", false},
		{"create a file and its parents", "OUT", fileDecl("/link/a/b/new", 0o644, "mine"), "/link", false},
		{"create a directory", "OUT", dirDecl("/link/newdir", 0o755), "/link", false},
		{"rewrite a file", "OUT", fileDecl("/link/x", 0o644, "mine"), "/link", false},
		{"chmod a file", "OUT", fileDecl("/link/x", 0o600, "theirs"), "/link", false},
		{"chmod a directory", "OUT", dirDecl("/link/d", 0o700), "/link", false},
		{"chown a file", "OUT", owned(fileDecl("/link/x", 0o644, "theirs")), "/link", true},
		{"chown a directory", "OUT", owned(dirDecl("/link/d", 0o755)), "/link", true},
		{"a link deeper down", "OUT/d", fileDecl("/srv/link/y", 0o600, "theirs too"), "/srv/link", false},
		{"a relative link", "../outside", fileDecl("/link/x", 0o600, "theirs"), "/link", false},
		{"a relative link deeper down", "../../outside/d", dirDecl("/srv/link/sub", 0o755), "/srv/link", false},
		{"a relative link through the root's parent, back in", "../root", fileDecl("/link/new", 0o644, "mine"), "/link", false},
		{"the root's parent", "BASE", fileDecl("/link/outside/x", 0o600, "theirs"), "/link", false},
		{"a link to a link that leads out", "/chain", fileDecl("/link/x", 0o600, "theirs"), "/link", false},
		{"a dangling link outside", "OUT/nope", fileDecl("/link/new", 0o644, "mine"), "/link", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.root {
				needRoot(t, "chown to another user")
			}
			base, root, outside := linkedRoot(t)
			target := strings.NewReplacer("OUT", outside, "BASE", base).Replace(tc.link)
			link := filepath.Join(root, tc.linkAt)
			os.MkdirAll(filepath.Dir(link), 0o755)
			named := link + " -> " + target // the link the cause names
			if target == "/chain" {         // link -> ROOT/chain -> OUT: the second leads out
				target = filepath.Join(root, "chain")
				if err := os.Symlink(outside, target); err != nil {
					t.Fatal(err)
				}
				named = target + " -> " + outside
			}
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			good := fileDecl("/etc/good", 0o644, "fine")
			resources := []spec.Resource{tc.decl, good}
			before := outsideSnapshot(t, base, root)
			e := host.NewEngine(host.Services{Root: root})

			preview := e.Preview(context.Background(), resources, nil)
			checkOutcomes(t, preview, map[string]string{tc.decl.Name: spec.Failed, good.Name: spec.Created})
			results, record, _ := e.Apply(context.Background(), resources, nil)
			checkOutcomes(t, results, map[string]string{tc.decl.Name: spec.Failed, good.Name: spec.Created})
			for _, res := range []spec.ResourceResult{resultOf(t, preview, tc.decl.Name), resultOf(t, results, tc.decl.Name)} {
				for _, part := range []string{filepath.Join(root, tc.decl.Target()), named, "outside the root " + root} {
					if !strings.Contains(res.Error, part) {
						t.Errorf("cause %q does not say %q", res.Error, part)
					}
				}
			}
			checkContent(t, filepath.Join(root, "etc/good"), "fine")
			checkUnchanged(t, before, outsideSnapshot(t, base, root))

			// Declared no more, it is removed from the root only, which
			// holds nothing of it: the removal fails the same way, and
			// nothing outside is deleted.
			results, _, _ = e.Apply(context.Background(), []spec.Resource{good}, record)
			if res := resultOf(t, results, tc.decl.Name); res.Outcome != spec.Failed || !strings.Contains(res.Error, named) {
				t.Errorf("removal: %+v, want failed naming the link", res)
			}
			checkUnchanged(t, before, outsideSnapshot(t, base, root))
		})
	}
}

// Links that stay under the root are followed as the machine follows them:
// relative ones, and absolute ones that name a place under the root (with
// root "/", every absolute link: /var/run -> /run).
func TestApplyFollowsLinksThatStayInTheRoot(t *testing.T) {
	t.Parallel()
	base, root, outside := linkedRoot(t)
	os.MkdirAll(filepath.Join(root, "real/sub"), 0o755)
	for link, target := range map[string]string{
		"abs":          filepath.Join(root, "real"),
		"rel":          "real",
		"srv/up":       "../real/sub",
		"srv/abs-root": root,
	} {
		os.MkdirAll(filepath.Dir(filepath.Join(root, link)), 0o755)
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	resources := []spec.Resource{
		fileDecl("/abs/a", 0o600, "a"),
		fileDecl("/rel/b", 0o640, "b"),
		dirDecl("/srv/up/c", 0o700),
		fileDecl("/srv/abs-root/real/d", 0o644, "d"),
		fileDecl("/real/new/e", 0o644, "e"), // a missing parent of its own is made
	}
	before := outsideSnapshot(t, base, root)
	e := host.NewEngine(host.Services{Root: root})
	results, record, _ := e.Apply(context.Background(), resources, nil)
	checkOutcomes(t, results, allOutcome(resources, spec.Created))
	checkContent(t, filepath.Join(root, "real/a"), "a")
	checkMode(t, filepath.Join(root, "real/b"), syscall.S_IFREG, 0o640)
	checkMode(t, filepath.Join(root, "real/sub/c"), syscall.S_IFDIR, 0o700)
	checkContent(t, filepath.Join(root, "real/d"), "d")
	checkContent(t, filepath.Join(root, "real/new/e"), "e")
	checkMode(t, filepath.Join(root, "real/new"), syscall.S_IFDIR, 0o755)

	results, record, writes := e.Apply(context.Background(), resources, record)
	checkOutcomes(t, results, allOutcome(resources, spec.Unchanged))
	if writes != 0 {
		t.Errorf("a second apply made %d writes", writes)
	}
	results, _, _ = e.Apply(context.Background(), nil, record)
	checkOutcomes(t, results, allOutcome(resources, spec.Removed))
	for _, p := range []string{"real/a", "real/b", "real/sub/c", "real/d", "real/new/e"} {
		checkAbsent(t, filepath.Join(root, p))
	}
	checkUnchanged(t, before, outsideSnapshot(t, base, root))
	if _, err := os.Stat(outside); err != nil {
		t.Fatal(err)
	}
}

// A link, in the root, to what is missing (a disk not mounted) is not made
// good: nothing is created where it points, the resource fails naming the
// link, and a record of something there is removed as already gone.
func TestApplyDoesNotCreateThroughADanglingLink(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "srv"), 0o755)
	os.MkdirAll(filepath.Join(root, "mnt"), 0o755)
	for link, target := range map[string]string{"srv/data": filepath.Join(root, "mnt/disk/data"), "srv/rel": "../mnt/disk"} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	abs, rel := fileDecl("/srv/data/x", 0o644, "x"), dirDecl("/srv/rel/d", 0o755)
	e := host.NewEngine(host.Services{Root: root})
	results, _, writes := e.Apply(context.Background(), []spec.Resource{abs, rel}, nil)
	checkOutcomes(t, results, map[string]string{abs.Name: spec.Failed, rel.Name: spec.Failed})
	for name, link := range map[string]string{abs.Name: filepath.Join(root, "srv/data") + " -> " + filepath.Join(root, "mnt/disk/data"), rel.Name: filepath.Join(root, "srv/rel") + " -> ../mnt/disk"} {
		if cause := resultOf(t, results, name).Error; !strings.Contains(cause, "is missing, reached through the link "+link) {
			t.Errorf("%s: cause %q does not name the link %s", name, cause, link)
		}
	}
	checkAbsent(t, filepath.Join(root, "mnt/disk"))
	if writes != 0 {
		t.Errorf("%d writes, want none", writes)
	}
	previous := []host.Applied{
		{Name: abs.Name, Kind: spec.KindFile, Path: "/srv/data/x", Digest: abs.Digest()},
		{Name: rel.Name, Kind: spec.KindDirectory, Path: "/srv/rel/d", Digest: rel.Digest(), OnRemove: spec.OnRemoveDelete},
	}
	results, record, _ := e.Apply(context.Background(), nil, previous)
	checkOutcomes(t, results, map[string]string{abs.Name: spec.Removed, rel.Name: spec.Removed})
	if len(record) != 0 {
		t.Errorf("record %+v, want empty", record)
	}
}

// A declared directory applied, then replaced by a link to a directory
// outside the root that holds files of the same names: removing what the
// mesh declared there deletes nothing outside. The file's removal fails
// naming the link (and stays on record); the directory, now a link, is
// someone else's and is left in place. The same when a parent of the
// directory becomes the link, and for on_remove delete.
func TestRemovalDoesNotFollowLinksOutOfTheRoot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		dir      spec.Resource
		replace  string // what becomes the link, under the root
		relative bool
	}{
		{"the directory", dirDecl("/d", 0o755), "/d", false},
		{"the directory, on_remove delete", dirDeleting("/d"), "/d", false},
		{"its parent", dirDecl("/srv/d", 0o755), "/srv", false},
		{"its parent, on_remove delete", dirDeleting("/srv/d"), "/srv", false},
		{"its parent, relative, on_remove delete", dirDeleting("/srv/d"), "/srv", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base, root, outside := linkedRoot(t)
			p := tc.dir.Target()
			f := fileDecl(p+"/x", 0o644, "theirs") // the same content as outside's
			e := host.NewEngine(host.Services{Root: root})
			_, record, _ := e.Apply(context.Background(), []spec.Resource{tc.dir, f}, nil)
			if len(record) != 2 || record[0].Digest == "" || record[1].Digest == "" {
				t.Fatalf("the first apply: record %+v", record)
			}
			// outside mirrors what the link will stand for.
			target := outside
			if tc.replace != p {
				os.MkdirAll(filepath.Join(outside, filepath.Base(p)), 0o755)
				os.WriteFile(filepath.Join(outside, filepath.Base(p), "x"), []byte("theirs"), 0o644)
			}
			if err := os.RemoveAll(filepath.Join(root, tc.replace)); err != nil {
				t.Fatal(err)
			}
			if tc.relative {
				target = "../outside"
			}
			if err := os.Symlink(target, filepath.Join(root, tc.replace)); err != nil {
				t.Fatal(err)
			}
			before := outsideSnapshot(t, base, root)

			results, record, _ := e.Apply(context.Background(), nil, record)
			checkUnchanged(t, before, outsideSnapshot(t, base, root))
			res := resultOf(t, results, f.Name)
			if res.Outcome != spec.Failed || !strings.Contains(res.Error, filepath.Join(root, tc.replace)+" -> "+target) || !strings.Contains(res.Error, "outside the root") {
				t.Errorf("the file's removal: %+v, want failed naming the link", res)
			}
			if _, ok := recordOf(record, f.Name); !ok {
				t.Errorf("record %+v, want the file on it, to be tried again", record)
			}
			if _, err := os.Readlink(filepath.Join(root, tc.replace)); err != nil {
				t.Errorf("the link is gone: %v", err)
			}
		})
	}
}

// FuzzNothingEscapesTheRoot builds a tree of links (relative and absolute,
// into the root and out of it, dangling, chained) and directories and files
// under a root, beside a directory outside it; declares files and
// directories at paths through them (modes, owners, on_remove delete);
// previews, applies, swaps parts of the tree for links, applies again, then
// a part of the declaration, then nothing. Whatever is refused or applied,
// nothing outside the root changes: not a name, a mode, an owner, a time,
// a byte. The encoding of a program is nothingEscapes'.
func FuzzNothingEscapesTheRoot(f *testing.F) {
	for _, seed := range [][]byte{
		// /l -> OUT; the file /l/x (outside's x: same content and mode).
		{1, 0, 2, 2, 0, 0, 1, 0, 3, 0, 0, 0, 1, 0, 0},
		// /l -> OUT/d; the file /l/x 0600: a chmod outside.
		{1, 0, 2, 2, 1, 0, 1, 0, 3, 1, 0, 0, 1, 0, 0},
		// /l -> OUT; the directory /l/d with a group: a chown outside.
		{1, 0, 2, 2, 0, 0, 1, 0, 1, 2, 1, 1, 0, 0, 0},
		// The directory /d (on_remove delete) and /d/x applied, then /d
		// swapped for a link to OUT, then both removed.
		{0, 1, 0, 0, 1, 2, 1, 0, 1, 0, 1, 1, 3, 0, 0, 0, 1, 1, 0, 1, 2, 0, 0},
		// /a -> ../outside; the file /a/d/x 0600.
		{1, 0, 0, 2, 5, 0, 0, 2, 0, 1, 3, 1, 0, 0, 1, 0, 0},
		// /l -> BASE; the directory /l/outside/a, on_remove delete.
		{1, 0, 2, 2, 12, 0, 0, 2, 2, 4, 0, 4, 1, 0, 1, 0, 0},
		// /l -> OUT and /x -> l; the file /x/x.
		{2, 0, 2, 2, 0, 0, 3, 2, 17, 0, 1, 1, 3, 0, 0, 0, 1, 0, 0},
		// Links that stay in: /l -> ROOT/d, /x -> d, /a -> .; files and a
		// directory through them, one setuid and owned.
		{3, 0, 2, 2, 3, 0, 3, 2, 7, 0, 0, 2, 8, 2, 1, 0, 3, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 2, 0, 1, 3, 3, 0, 0, 0, 0, 0},
	} {
		f.Add(seed)
	}
	// And programs from a fixed generator, so that a plain `go test` runs
	// a few dozen trees more.
	state := uint64(0x6d657368)
	for i := range 60 {
		seed := make([]byte, 16+i%48)
		for j := range seed {
			state = state*6364136223846793005 + 1442695040888963407
			seed[j] = byte(state >> 56)
		}
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, program []byte) {
		nothingEscapes(t, program)
	})
}

// fuzzNames are the names a fuzzed tree is made of.
var fuzzNames = []string{"a", "d", "l", "x", "outside", "root"}

// fuzzTargets are where a fuzzed link points: OUT is the directory
// outside, ROOT the root, BASE their parent. All of them lie in the
// directory the test snapshots (never "/": with the fix reverted, a test
// would write to the machine).
var fuzzTargets = []string{
	"OUT", "OUT/d", "ROOT", "ROOT/d", "..", "../outside", "../../outside/d", "d", ".", "../root/d",
	"nope", "OUT/nope", "BASE", "../d", "a/../..", "ROOT/../outside", "ROOT/a/l", "l", "OUT/l",
}

// program reads a fuzzed input one byte at a time; past its end, zeros.
type program struct {
	b []byte
	i int
}

func (p *program) next(n int) int {
	if p.i >= len(p.b) {
		return 0
	}
	p.i++
	return int(p.b[p.i-1]) % n
}

// path is a path of one to three of fuzzNames: a byte for the count, one
// per name.
func (p *program) path() string {
	parts := make([]string, 1+p.next(3))
	for i := range parts {
		parts[i] = fuzzNames[p.next(len(fuzzNames))]
	}
	return "/" + strings.Join(parts, "/")
}

// nothingEscapes runs one program, which reads:
//
//	entries (n%8), each: path, kind (%4: directory, file, link, link) and
//	  for a link its target (%len(fuzzTargets))
//	resources (1+n%8), each: where (%3: 0, a path; else, when there are
//	  entries, one of them (%len) and a name under it), mode (%5), kind
//	  (%2); a file: content (%2), owner 4242 (%3 == 0); a directory:
//	  on_remove delete (%2 == 0), group 4243 (%3 == 0)
//	swaps (%4), each: path, kind and target as an entry
//	kept (%(resources+1)): how many stay declared in the third apply
func nothingEscapes(t *testing.T, input []byte) {
	prog := &program{b: input}
	top := t.TempDir()
	base := filepath.Join(top, "base")
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(root, "d"), filepath.Join(outside, "d"), filepath.Join(outside, "a")} {
		os.MkdirAll(d, 0o755)
	}
	for _, name := range []string{"x", "d/x", "a/x"} {
		os.WriteFile(filepath.Join(outside, name), []byte("c0"), 0o644)
	}
	os.Symlink("../root", filepath.Join(outside, "l"))
	expand := strings.NewReplacer("OUT", outside, "ROOT", root, "BASE", base).Replace

	// The tree under the root, made through an os.Root so that the test
	// itself touches nothing outside (an os.Root refuses absolute links:
	// a step through one does nothing).
	in, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var entries []string
	entry := func() {
		p := strings.TrimPrefix(prog.path(), "/")
		entries = append(entries, "/"+p)
		kind := prog.next(4)
		in.RemoveAll(p)
		in.MkdirAll(filepath.Dir(p), 0o755)
		switch kind {
		case 0:
			in.Mkdir(p, 0o755)
		case 1:
			in.WriteFile(p, []byte("c0"), 0o644)
		default:
			in.Symlink(expand(fuzzTargets[prog.next(len(fuzzTargets))]), p)
		}
	}
	for range prog.next(8) {
		entry()
	}

	var resources []spec.Resource
	seen := map[string]bool{}
	for range 1 + prog.next(8) {
		var p string
		if prog.next(3) == 0 || len(entries) == 0 {
			p = prog.path()
		} else {
			p = entries[prog.next(len(entries))] + "/" + fuzzNames[prog.next(len(fuzzNames))]
		}
		mode := []spec.Mode{0o644, 0o600, 0o755, 0o4755, 0o1777}[prog.next(5)]
		var r spec.Resource
		if prog.next(2) == 0 {
			r = fileDecl(p, mode, fmt.Sprintf("c%d", prog.next(2)))
			if prog.next(3) == 0 {
				fileOf(r).Owner = "4242"
			}
		} else {
			r = dirDecl(p, mode)
			if prog.next(2) == 0 {
				dirOf(r).OnRemove = spec.OnRemoveDelete
			}
			if prog.next(3) == 0 {
				dirOf(r).Group = "4243"
			}
		}
		if !seen[p] {
			seen[p] = true
			resources = append(resources, r)
		}
	}

	before := outsideSnapshot(t, top, root)
	ctx := context.Background()
	e := host.NewEngine(host.Services{Root: root})
	e.Preview(context.Background(), resources, nil)
	_, record, _ := e.Apply(ctx, resources, nil)
	for range prog.next(4) {
		entry()
	}
	e.Preview(context.Background(), resources, record)
	_, record, _ = e.Apply(ctx, resources, record)
	kept := resources[:prog.next(len(resources)+1)]
	_, record, _ = e.Apply(ctx, kept, record)
	e.Apply(ctx, nil, record)
	checkUnchanged(t, before, outsideSnapshot(t, top, root))
}

// TestMountSourceThroughALinkIsRefused: the engine follows links when it
// binds a mount source, so a source that is a link, or lies through one
// leading out of the root, fails its container naming it, before the engine
// is asked anything; a plain directory gets as far as the engine.
func TestMountSourceThroughALinkIsRefused(t *testing.T) {
	endpoint := dockertest.DeadEngine(t)
	d, err := host.NewDocker(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	root, outside := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(root, "srv/real"), 0o755)
	os.MkdirAll(filepath.Join(outside, "data"), 0o755)
	os.Symlink(outside, filepath.Join(root, "srv/out"))
	os.Symlink("real", filepath.Join(root, "srv/link"))
	e := host.NewEngine(host.Services{Root: root, Docker: d, Node: "alpha", Address: "127.0.0.1", Subnet: netip.MustParsePrefix("10.214.0.0/24")})
	for _, tc := range []struct{ source, want string }{
		{"/srv/out/data", "srv/out"},
		{"/srv/out", "is a symbolic link"},
		{"/srv/link", "is a symbolic link"},
		{"/srv/real", "does not answer"},
	} {
		ctr := spec.Resource{Name: "m:container:web", Kind: spec.KindContainer, Module: "m", Spec: &spec.ContainerSpec{
			Name: "web", Image: "x:1", Mounts: []spec.MountSpec{{Source: tc.source, Target: "/data"}}}}
		results, _, _ := e.Apply(context.Background(), []spec.Resource{ctr}, nil)
		if r := results[0]; r.Outcome != spec.Failed || !strings.Contains(r.Error, tc.want) {
			t.Errorf("mount source %s: %s %q, want a failure naming %q", tc.source, r.Outcome, r.Error, tc.want)
		}
	}
}
