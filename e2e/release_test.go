package e2e

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/cli"
	"github.com/mesh-fleet/mesh/internal/gobuild"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// stampVar is a string the mesh links in and its code reads (nats-server's
// commit, which it logs and serves): a build stamped with -X differs from
// another by that string only.
const stampVar = "github.com/nats-io/nats-server/v2/server.gitCommit"

// meshRelease is mesh built as a release is (-s -w), stamped with -X
// stampVar=stamp in the same -ldflags. Each stamp is a link of its own
// (some 17 s of CPU here), so the tests share two: "meshrel-v1" and
// "meshrel-v2" (the v2 any test delivers or rolls).
func meshRelease(t *testing.T, stamp string) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return builds.Binary(t, gobuild.Build{Dir: root, GOOS: "linux", GOARCH: "amd64", LDFlags: "-s -w -X " + stampVar + "=" + stamp})
}

// stripped says what -s -w leave out is out: the symbol table and DWARF.
func stripped(t *testing.T, path string) error {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Name == ".symtab" || strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_") {
			return fmt.Errorf("it holds section %s", s.Name)
		}
	}
	return nil
}

// TestReleaseBuildsKeepEveryFlag: two builds of the same source that differ
// by an -X string, both with -s -w in the same -ldflags, each kept the
// other flags (the journal's second -ldflags silently dropped -s -w and
// grew the binary by 40%): the strings are there, each is stripped and no
// larger than the other, and its build information reads. mesh version on each names its own SHA-256, where the version its
// build recorded is the same for both (invariant 13: the version is the
// digest, never a stamp).
func TestReleaseBuildsKeepEveryFlag(t *testing.T) {
	optin.NeedSlow(t, "builds two mesh binaries")
	t.Parallel()
	v1, v2 := meshRelease(t, "meshrel-v1"), meshRelease(t, "meshrel-v2")
	b1, b2 := readBytes(t, v1), readBytes(t, v2)
	if !bytes.Contains(b1, []byte("meshrel-v1")) || !bytes.Contains(b2, []byte("meshrel-v2")) || bytes.Contains(b1, []byte("meshrel-v2")) {
		t.Error("each build does not hold its own -X string, and only its own")
	}
	for _, p := range []string{v1, v2} {
		if err := stripped(t, p); err != nil {
			t.Errorf("%s is not stripped by -s -w: %v", p, err)
		}
		info, err := buildinfo.ReadFile(p)
		if err != nil {
			t.Fatalf("%s: build information does not read: %v", p, err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		// -trimpath leaves -ldflags out of what the build records: the
		// strings and the sections above are what says the flags held.
		if info.Path != release.MainPath || settings["GOOS"] != "linux" || settings["GOARCH"] != "amd64" || settings["-trimpath"] != "true" {
			t.Errorf("%s: build information path %q, settings %v: want mesh for linux/amd64, -trimpath", p, info.Path, settings)
		}
	}
	unstripped := int64(len(readBytes(t, meshBin)))
	if d := len(b1) - len(b2); d < -4096 || d > 4096 || int64(len(b1)) > unstripped*85/100 {
		t.Errorf("sizes: v1 %d, v2 %d, the unstripped build %d: want v1 and v2 within 4 KiB of each other and both well under the unstripped", len(b1), len(b2), unstripped)
	}
	versions := map[string]cli.Version{}
	for _, p := range []string{v1, v2} {
		out, err := exec.Command(p, "version", "--json").Output()
		if err != nil {
			t.Fatalf("%s version: %v", p, err)
		}
		var v cli.Version
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatal(err)
		}
		if v.SHA256 != fileDigest(t, p) {
			t.Errorf("%s: mesh version says sha256 %s, the file's is %s", p, v.SHA256, fileDigest(t, p))
		}
		versions[p] = v
	}
	if versions[v1].SHA256 == versions[v2].SHA256 || versions[v1].Version != versions[v2].Version {
		t.Errorf("v1 %+v, v2 %+v: want two digests, one recorded version", versions[v1], versions[v2])
	}
}

// TestReleasePublish: two builds of mesh publish as two releases for
// linux/amd64 and an arm64 build as linux/arm64, named by their digests;
// publishing one again changes nothing. A C program, a truncated copy, a
// text file and a Go program that is not mesh are each refused, exit 2,
// with their reason in one line, and nothing of them is stored.
func TestReleasePublish(t *testing.T) {
	optin.NeedSlow(t, "builds mesh for four targets")
	t.Parallel()
	m := newMesh(t)
	v1, v2 := meshRelease(t, "meshrel-v1"), meshRelease(t, "meshrel-v2")
	arm := builds.Binary(t, gobuild.Build{Dir: builds.Program(t, release.MainPath), GOOS: "linux", GOARCH: "arm64", LDFlags: "-s -w"})
	want := map[string]string{fileDigest(t, v1): "linux/amd64", fileDigest(t, v2): "linux/amd64", fileDigest(t, arm): "linux/arm64"}
	for _, p := range []string{v1, v2, arm} {
		out := mustRun(t, "release", "publish", "--dir", m.dir, p)
		if wantOut := fmt.Sprintf("published release %s (%s, %s, ", fileDigest(t, p), want[fileDigest(t, p)], runtime.Version()); !strings.HasPrefix(out, wantOut) {
			t.Errorf("publish %s: %q, want %q...", p, out, wantOut)
		}
	}
	if out := mustRun(t, "release", "publish", "--dir", m.dir, v1); !strings.Contains(out, "was published at") || !strings.Contains(out, "nothing changed") {
		t.Errorf("publishing v1 again: %q, want that it was published and nothing changed", out)
	}

	dir := t.TempDir()
	truncated := filepath.Join(dir, "truncated")
	b1 := readBytes(t, v1)
	writeBytes(t, truncated, b1[:len(b1)/2])
	text := filepath.Join(dir, "notes.txt")
	writeBytes(t, text, []byte("mesh v2 release notes\n"))
	other := builds.Binary(t, gobuild.Build{Dir: builds.Program(t, "example.com/notmesh"), GOOS: "linux", GOARCH: "amd64", LDFlags: "-s -w"})
	refused := []struct{ path, says string }{
		{"/bin/true", "not a Go binary"},
		{truncated, "truncated"},
		{text, "not an ELF executable"},
		{other, "a Go binary of example.com/notmesh, not mesh"},
	}
	for _, r := range refused {
		out, errOut, code := runMesh(t, "release", "publish", "--dir", m.dir, r.path)
		if code != 2 || out != "" || !strings.Contains(errOut, r.says) || !strings.HasSuffix(errOut, "; nothing was published\n") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("publish %s: exit %d, stdout %q, stderr %q; want exit 2 and one line saying %q", r.path, code, out, errOut, r.says)
		}
	}

	var list []spec.Release
	if err := json.Unmarshal([]byte(mustRun(t, "release", "list", "--json", "--dir", m.dir)), &list); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range list {
		got[r.Digest] = r.Target()
		if r.Go != runtime.Version() || r.Size <= 0 {
			t.Errorf("release %+v: want Go %s and its size", r, runtime.Version())
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(list) != 3 {
		t.Errorf("release list: %v, want %v", got, want)
	}
	table := mustRun(t, "release", "list", "--dir", m.dir)
	for d, target := range want {
		if !strings.Contains(table, d+"  "+target) {
			t.Errorf("release list does not show %s %s:\n%s", d, target, table)
		}
	}

	// Nothing of a refused file reached the store.
	m.d.stop(t)
	db, err := store.Open(t.Context(), filepath.Join(m.dir, "controller", "mesh.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, r := range refused {
		if has, err := db.HasBlob(t.Context(), "sha256:"+fileDigest(t, r.path)); err != nil || has {
			t.Errorf("%s: blob stored %v (%v), want none", r.path, has, err)
		}
	}
	for d := range want {
		if has, err := db.HasBlob(t.Context(), "sha256:"+d); err != nil || !has {
			t.Errorf("release %s: blob stored %v (%v), want it", d, has, err)
		}
	}
}

func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
