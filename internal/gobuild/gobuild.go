// Package gobuild is test support: it builds Go programs as a mesh release
// is built (CGO off, -trimpath, no VCS stamp, one -ldflags), for any
// target, each build once per test binary run, so tests get real binaries
// of the target they name without paying for a build per test.
package gobuild

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Build is one build of a main package.
type Build struct {
	Dir    string // the main package's directory
	GOOS   string
	GOARCH string
	// LDFlags is the one -ldflags value: a second -ldflags would replace
	// the first, not add to it, so everything goes in this one.
	LDFlags string
}

// Builder builds programs, each distinct Build once per run. The binaries
// are kept between runs, under the temporary directory, one directory per
// Build: go build leaves an output that is up to date as it is, so a run
// whose sources did not change links nothing. New makes one; Close removes
// what is the run's own (the programs Program wrote).
type Builder struct {
	mu   sync.Mutex
	dir  string // the run's own: Program's sources
	kept string // the binaries, kept between runs
	bins map[Build]*result
}

type result struct {
	once sync.Once
	path string
	err  error
}

// New is a Builder with a new temporary directory of its own.
func New() (*Builder, error) {
	dir, err := os.MkdirTemp("", "gobuild-")
	if err != nil {
		return nil, err
	}
	kept := filepath.Join(os.TempDir(), fmt.Sprintf("mesh-gobuild-%d", os.Getuid()))
	if err := os.MkdirAll(kept, 0o700); err != nil {
		return nil, err
	}
	return &Builder{dir: dir, kept: kept, bins: map[Build]*result{}}, nil
}

// Close removes what b wrote for this run alone.
func (b *Builder) Close() error { return os.RemoveAll(b.dir) }

// Binary is the path of bd's binary, built (or found up to date) the first
// time it is asked for; a build that fails fails t (and every later ask
// for it).
func (b *Builder) Binary(t testing.TB, bd Build) string {
	t.Helper()
	b.mu.Lock()
	r, ok := b.bins[bd]
	if !ok {
		dir, err := filepath.Abs(bd.Dir)
		if err != nil {
			dir = bd.Dir
		}
		key := sha256.Sum256([]byte(strings.Join([]string{dir, bd.GOOS, bd.GOARCH, bd.LDFlags}, "\x00")))
		// A program of this run's own (Program) is built with it and goes
		// with it; only a build of a lasting directory is kept.
		where := b.kept
		if strings.HasPrefix(dir, b.dir+string(filepath.Separator)) {
			where = b.dir
		}
		r = &result{path: filepath.Join(where, hex.EncodeToString(key[:8]), "mesh")}
		b.bins[bd] = r
	}
	b.mu.Unlock()
	r.once.Do(func() { r.err = buildLocked(bd, r.path) })
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.path
}

// buildLocked builds bd to out holding out's directory's lock, so two test
// processes never write one binary at once.
func buildLocked(bd Build, out string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		return err
	}
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(out), "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	return build(bd, out)
}

func build(bd Build, out string) error {
	args := []string{"build", "-trimpath", "-buildvcs=false", "-o", out}
	if bd.LDFlags != "" {
		args = append(args, "-ldflags="+bd.LDFlags)
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Dir = bd.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+bd.GOOS, "GOARCH="+bd.GOARCH, "GOFLAGS=", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s/%s (-ldflags %q): %v\n%s", bd.Dir, bd.GOOS, bd.GOARCH, bd.LDFlags, err, b)
	}
	return nil
}

// Program writes a one-file program of module mod (its main package at
// the module's root) under b's directory, and returns its directory: a
// program whose module is github.com/mesh-fleet/mesh is, to its build
// information, a mesh binary, and builds in seconds for any target.
func (b *Builder) Program(t testing.TB, mod string) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	dir := filepath.Join(b.dir, "src", filepath.FromSlash(mod))
	if _, err := os.Stat(filepath.Join(dir, "main.go")); err == nil {
		return dir // written before: a build may be reading it
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"go.mod":  "module " + mod + "\n\ngo 1.26\n",
		"main.go": "package main\n\nfunc main() { println(\"a program of " + mod + ", built by a test\") }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
