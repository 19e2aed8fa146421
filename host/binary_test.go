package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// binaryRelease is a release of content for this machine's system, and
// its resource.
func binaryRelease(content []byte) (spec.Release, spec.Resource) {
	sum := sha256.Sum256(content)
	rel := spec.Release{Digest: hex.EncodeToString(sum[:]), Size: int64(len(content)), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH}
	return rel, spec.NodeBinary(rel, 0)
}

// binaryEngine is an engine delivering binaries to a new versions
// directory under D/host, with blobs from blobs.
func binaryEngine(t *testing.T, blobs host.BlobFetcher) (*host.Engine, string) {
	t.Helper()
	versions := filepath.Join(t.TempDir(), "host", spec.VersionsDir)
	e := host.NewEngine(host.Services{Root: t.TempDir(), Blobs: blobs, Versions: versions})
	return e, versions
}

// versionsTree is what a versions directory holds: each path beneath it,
// a file's mode and SHA-256.
func versionsTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if errors.Is(err, os.ErrNotExist) && p == dir {
			return filepath.SkipDir
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if fi.IsDir() {
			out[rel] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = fmt.Sprintf("%04o %x", fi.Mode().Perm(), sum[:4])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBinaryDelivered: a binary is fetched to versions/<digest>/mesh,
// 0755, and want names it; applied again it is verified and nothing is
// fetched or written; bytes changed on disk are fetched again; a binary
// already there is named in want without a fetch; removal deletes want and
// keeps every binary.
func TestBinaryDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	content := bytes.Repeat([]byte("mesh binary v2 "), 70000) // ~1 MiB: chunks
	rel, r := binaryRelease(content)
	blobs := &fakeBlobs{blobs: map[string][]byte{"sha256:" + rel.Digest: content}}
	e, versions := binaryEngine(t, blobs)
	bin := filepath.Join(versions, rel.Digest, spec.VersionBinary)
	want := filepath.Join(versions, spec.WantFile)

	if res := e.Preview(ctx, []spec.Resource{r}, nil); res[0].Outcome != spec.Created {
		t.Fatalf("preview %+v, want created", res)
	}
	checkAbsent(t, versions)
	results, record, _ := e.Apply(ctx, []spec.Resource{r}, nil)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Created})
	checkContent(t, bin, string(content))
	if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: %v %v, want mode 0755", bin, fi, err)
	}
	checkContent(t, want, rel.Digest+"\n")
	if tree := versionsTree(t, versions); len(tree) != 4 { // ., want, <digest>, <digest>/mesh
		t.Errorf("versions holds %v, want the binary and want alone", tree)
	}

	results, record, writes := e.Apply(ctx, []spec.Resource{r}, record)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Unchanged})
	if writes != 0 || blobs.callCount() != 1 {
		t.Errorf("applied again: %d writes, %d fetches, want 0 and 1", writes, blobs.callCount())
	}

	// Bytes changed in place (same size): fetched and written again.
	changed := bytes.Clone(content)
	changed[100] ^= 0xff
	if err := os.WriteFile(bin, changed, 0o755); err != nil {
		t.Fatal(err)
	}
	results, record, _ = e.Apply(ctx, []spec.Resource{r}, record)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Created})
	checkContent(t, bin, string(content))
	if blobs.callCount() != 2 {
		t.Errorf("a changed binary: %d fetches, want 2", blobs.callCount())
	}

	// want names another (the launcher's operator moved it): named again,
	// the binary not fetched.
	if err := os.WriteFile(want, []byte(strings.Repeat("0", 64)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	results, record, _ = e.Apply(ctx, []spec.Resource{r}, record)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Changed})
	checkContent(t, want, rel.Digest+"\n")
	if blobs.callCount() != 2 {
		t.Errorf("want rewritten: %d fetches, want 2", blobs.callCount())
	}

	// Removal: stop managing. want goes; the binary stays.
	results, record, _ = e.Apply(ctx, nil, record)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Removed})
	checkAbsent(t, want)
	checkContent(t, bin, string(content))
	if len(record) != 0 {
		t.Errorf("record after removal %+v", record)
	}
}

// TestBinaryRetry: a binary declared with a retry count writes the retry
// file only while the launcher marks the release bad and has not honoured
// that count: once written (or honoured, or for a release not bad) applying
// again writes nothing; a higher count writes it again.
func TestBinaryRetry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	content := []byte("mesh binary that once fell back")
	rel, r := binaryRelease(content)
	e, versions := binaryEngine(t, &fakeBlobs{blobs: map[string][]byte{"sha256:" + rel.Digest: content}})
	retryFile := filepath.Join(versions, spec.RetryFile)
	withRetry := func(n int) spec.Resource { return spec.NodeBinary(rel, n) }
	launchRecord := func(l spec.Launch) {
		t.Helper()
		body, _ := json.Marshal(l)
		if err := os.WriteFile(filepath.Join(versions, spec.LaunchFile), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	_, record, _ := e.Apply(ctx, []spec.Resource{r}, nil)
	// Not bad: a retry count asks nothing of the launcher.
	results, record, writes := e.Apply(ctx, []spec.Resource{withRetry(1)}, record)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Unchanged})
	if writes != 0 {
		t.Errorf("a retry of a release not bad: %d writes", writes)
	}
	checkAbsent(t, retryFile)

	bad := map[string]spec.Fallback{rel.Digest: {Digest: rel.Digest, Reason: "exited with status 1 before it was ready", At: time.Now()}}
	launchRecord(spec.Launch{Bad: bad})
	results, record, _ = e.Apply(ctx, []spec.Resource{withRetry(1)}, record)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Changed})
	checkContent(t, retryFile, rel.Digest+" 1\n")
	results, record, writes = e.Apply(ctx, []spec.Resource{withRetry(1)}, record)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Unchanged})
	if writes != 0 {
		t.Errorf("the same retry again: %d writes", writes)
	}

	// Honoured, and bad again: the same count is never asked twice.
	os.Remove(retryFile)
	launchRecord(spec.Launch{Bad: bad, Retried: map[string]int{rel.Digest: 1}})
	results, record, _ = e.Apply(ctx, []spec.Resource{withRetry(1)}, record)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Unchanged})
	checkAbsent(t, retryFile)
	results, _, _ = e.Apply(ctx, []spec.Resource{withRetry(2)}, record)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Changed})
	checkContent(t, retryFile, rel.Digest+" 2\n")
}

// TestBinaryRefusals: bytes that do not hash to the digest, a source that
// sends more than the size, a fetch that fails half-way and a binary for
// another system fail the resource, naming the cause, and leave no binary,
// no temporary file and no want.
func TestBinaryRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	content := bytes.Repeat([]byte("mesh binary v3 "), 1000)
	rel, r := binaryRelease(content)
	blob := "sha256:" + rel.Digest
	for _, tc := range []struct {
		name   string
		blobs  host.BlobFetcher
		system [2]string
		cause  []string
	}{
		{"bytes changed", &fakeBlobs{blobs: map[string][]byte{blob: bytes.ToUpper(content)}}, [2]string{}, []string{rel.Digest, "digest is sha256:"}},
		{"more than its size", &fakeBlobs{blobs: map[string][]byte{blob: append(bytes.Clone(content), 'x')}}, [2]string{}, []string{rel.Digest, "more bytes than the"}},
		{"stops half-way", halfBlobs{content: content, err: errors.New("controller gone")}, [2]string{}, []string{rel.Digest, "controller gone"}},
		{"another arch", &fakeBlobs{blobs: map[string][]byte{blob: content}}, [2]string{"linux", "riscv64"}, []string{"built for " + runtime.GOOS + "/" + runtime.GOARCH, "this host runs linux/riscv64"}},
		{"another os", &fakeBlobs{blobs: map[string][]byte{blob: content}}, [2]string{"darwin", runtime.GOARCH}, []string{"this host runs darwin/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, versions := binaryEngine(t, tc.blobs)
			if tc.system[0] != "" {
				host.PretendSystem(e, tc.system[0], tc.system[1])
			}
			results, _, _ := e.Apply(ctx, []spec.Resource{r}, nil)
			checkOutcomes(t, results, map[string]string{r.Name: spec.Failed})
			for _, part := range tc.cause {
				if !strings.Contains(results[0].Error, part) {
					t.Errorf("cause %q does not say %q", results[0].Error, part)
				}
			}
			for p := range versionsTree(t, versions) {
				if p != "." && p != rel.Digest {
					t.Errorf("versions holds %s after a failed delivery", p)
				}
			}
			if tc.system[0] != "" {
				checkAbsent(t, versions)
				if res := e.Preview(ctx, []spec.Resource{r}, nil); res[0].Outcome != spec.Failed {
					t.Errorf("preview of another system's binary: %+v", res)
				}
			}
		})
	}
}

// halfBlobs writes the first half of content, then fails with err (nil:
// blocks until its context ends).
type halfBlobs struct {
	content []byte
	err     error
	started string // a file made once the half is written
}

func (h halfBlobs) Fetch(ctx context.Context, _ string, _ int64, w io.Writer) error {
	if _, err := w.Write(h.content[:len(h.content)/2]); err != nil {
		return err
	}
	if h.err != nil {
		return h.err
	}
	if h.started != "" {
		os.WriteFile(h.started, nil, 0o644)
	}
	<-ctx.Done()
	return ctx.Err()
}

// killedEnv names, in the child TestBinaryKilledMidFetch starts, the
// versions directory to deliver into.
const killedEnv = "MESH_TEST_BINARY_KILLED"

// TestBinaryKilledMidFetch: a host killed with SIGKILL half-way through a
// fetch leaves no versions/<digest>/mesh at all (only its temporary
// file), and the next apply takes the leftover away and delivers the whole
// binary.
func TestBinaryKilledMidFetch(t *testing.T) {
	content := bytes.Repeat([]byte("mesh binary v4 "), 100000)
	rel, r := binaryRelease(content)
	if dir := os.Getenv(killedEnv); dir != "" {
		// The child: deliver, and hang half-way until killed. Its root is
		// in the parent's directory, not a t.TempDir of its own, which
		// its SIGKILL would leave behind.
		root := filepath.Join(dir, "..", "root")
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		e := host.NewEngine(host.Services{Root: root, Blobs: halfBlobs{content: content, started: filepath.Join(dir, "..", "started")}, Versions: dir})
		e.Apply(context.Background(), []spec.Resource{r}, nil)
		t.Fatal("the fetch ended; it should have been killed")
	}
	t.Parallel()
	d := t.TempDir()
	versions := filepath.Join(d, spec.VersionsDir)
	cmd := exec.Command(os.Args[0], "-test.run=^TestBinaryKilledMidFetch$", "-test.count=1")
	cmd.Env = append(os.Environ(), killedEnv+"="+versions)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	poll.Until(t, 30*time.Second, "the child to fetch half the binary", func() error {
		_, err := os.Stat(filepath.Join(d, "started"))
		return err
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	bin := filepath.Join(versions, rel.Digest, spec.VersionBinary)
	checkAbsent(t, bin)
	checkAbsent(t, filepath.Join(versions, spec.WantFile))
	leftovers := 0
	for p := range versionsTree(t, versions) {
		if strings.HasPrefix(filepath.Base(p), ".mesh.fetch-") {
			leftovers++
		}
	}
	if leftovers != 1 {
		t.Errorf("the killed fetch left %d temporary files, want its one: %v", leftovers, versionsTree(t, versions))
	}

	blobs := &fakeBlobs{blobs: map[string][]byte{"sha256:" + rel.Digest: content}}
	e := host.NewEngine(host.Services{Root: t.TempDir(), Blobs: blobs, Versions: versions})
	results, _, _ := e.Apply(context.Background(), []spec.Resource{r}, nil)
	checkOutcomes(t, results, map[string]string{r.Name: spec.Created})
	checkContent(t, bin, string(content))
	checkContent(t, filepath.Join(versions, spec.WantFile), rel.Digest+"\n")
	if tree := versionsTree(t, versions); len(tree) != 4 {
		t.Errorf("after the re-apply versions holds %v, want the binary and want alone", tree)
	}
}
