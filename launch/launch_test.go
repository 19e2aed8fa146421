package launch_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/gobuild"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/launch"
	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// version is a stand-in version of mesh: testdata/child built to behave
// one way.
type version struct{ path, digest string }

func child(t *testing.T, behaviour string) version {
	t.Helper()
	path := builds.Binary(t, gobuild.Build{Dir: "testdata/child", GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		LDFlags: "-s -w -X main.behaviour=" + behaviour})
	d, err := release.Digest(path)
	if err != nil {
		t.Fatal(err)
	}
	return version{path, d}
}

// deliver puts v where the binary resource puts a delivered version, and,
// with want, names it the version the node wants.
func deliver(t *testing.T, dir string, v version, want bool) {
	t.Helper()
	versions := filepath.Join(dir, "host", spec.VersionsDir)
	if err := os.MkdirAll(filepath.Join(versions, v.digest), 0o700); err != nil {
		t.Fatal(err)
	}
	body, err := os.ReadFile(v.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(versions, v.digest, spec.VersionBinary), body, 0o755); err != nil {
		t.Fatal(err)
	}
	if want {
		if err := os.WriteFile(filepath.Join(versions, spec.WantFile), []byte(v.digest+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readLaunch(t testing.TB, dir string) spec.Launch {
	t.Helper()
	var l spec.Launch
	body, err := os.ReadFile(filepath.Join(dir, "host", spec.VersionsDir, spec.LaunchFile))
	if err != nil {
		return l
	}
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// children is what the children wrote in D/children.log.
func children(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "children.log"))
	return string(b)
}

// running is a launcher run by a test in its goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, cfg launch.Config) *running {
	t.Helper()
	l, err := launch.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Error("the launcher did not stop within 30 s")
		}
	})
	return r
}

func (r *running) ended(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(within):
		t.Fatalf("the launcher still runs after %s", within)
		return nil
	}
}

func newDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.MkdirAll(filepath.Join(dir, "host"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// healthyWithin is TestFallback's window for a version to be ready: long
// enough that a child which exits at once is seen to exit, and the
// fallback is ready, on a machine as loaded as CI's (with 1 s, both were
// taken for "not ready" there).
const healthyWithin = 5 * time.Second

// A wanted version that exits before it is ready, or is not ready in
// time, is marked bad with why, and the launcher falls back to its own
// executable, which becomes good; the bad version is not started again.
func TestFallback(t *testing.T) {
	t.Parallel()
	self := child(t, "ready")
	for _, tc := range []struct {
		behaviour, reason string
	}{
		{"exit", "exited with status 1 before it was ready"},
		{"never", "not ready within 5s"},
		{"early", "exited with status 75 before it was ready"},
	} {
		t.Run(tc.behaviour, func(t *testing.T) {
			t.Parallel()
			dir := newDir(t)
			bad := child(t, tc.behaviour)
			deliver(t, dir, bad, true)
			start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path, HealthyWithin: healthyWithin, StopGrace: time.Second})
			poll.Until(t, 20*time.Second, "the fallback good", func() error {
				l := readLaunch(t, dir)
				if l.Good == self.digest && l.Running == self.digest {
					return nil
				}
				return fmt.Errorf("%+v", l)
			})
			l := readLaunch(t, dir)
			if f := l.Bad[bad.digest]; f.Reason != tc.reason || f.Digest != bad.digest || f.At.IsZero() {
				t.Errorf("bad %+v, want the reason %q", l.Bad, tc.reason)
			}
			if n := strings.Count(children(dir), "start "+tc.behaviour); n != 1 {
				t.Errorf("the bad version started %d times:\n%s", n, children(dir))
			}
			if tc.behaviour == "never" && !strings.Contains(children(dir), "terminated never") {
				t.Errorf("the version not ready in time was not stopped:\n%s", children(dir))
			}
		})
	}
}

// A ready child that stands aside (exit 75) has the launcher start the
// version its node wants; the flags the launcher was given go to the
// first child only, D/config.yaml keeping them from then on.
func TestStandAsideStartsTheWantedVersion(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	self := child(t, "ready")
	start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path, Args: []string{"--subnet=10.9.0.0/24"}})
	poll.Until(t, 20*time.Second, "the own executable good", func() error {
		l := readLaunch(t, dir)
		if l.Good == self.digest {
			return nil
		}
		return fmt.Errorf("%+v", l)
	})
	v2 := child(t, "ready2")
	deliver(t, dir, v2, true)
	poll.Until(t, 20*time.Second, "v2 good", func() error {
		l := readLaunch(t, dir)
		if l.Good == v2.digest && l.Running == v2.digest {
			return nil
		}
		return fmt.Errorf("%+v\n%s", l, children(dir))
	})
	log := children(dir)
	if !strings.Contains(log, "aside ready ") {
		t.Errorf("the first version did not stand aside:\n%s", log)
	}
	lines := strings.Split(strings.TrimSpace(log), "\n")
	if !strings.HasSuffix(lines[0], "serve host --dir "+dir+" --subnet=10.9.0.0/24") {
		t.Errorf("the first child was called %q", lines[0])
	}
	var last string
	for _, l := range lines {
		if strings.HasPrefix(l, "start ") {
			last = l
		}
	}
	if !strings.HasPrefix(last, "start ready2") || !strings.HasSuffix(last, "serve host --dir "+dir) {
		t.Errorf("the wanted version was called %q, want serve host --dir %s alone", last, dir)
	}
	// Each child was handed the digest of the file it runs, hashed by the
	// launcher already (release.HandoffEnv).
	for _, v := range []version{self, v2} {
		if !regexp.MustCompile(`(?m)^handed \d+ \S+ ` + v.digest + `$`).MatchString(log) {
			t.Errorf("no child was handed the digest %s of its file:\n%s", v.digest, log)
		}
	}
}

// A want file that names no release digest is ignored: the launcher runs
// its own executable, not a delivered version the file points at
// otherwise (the child reads the file alike, and does not stand aside).
func TestBadWantIsIgnored(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	self := child(t, "ready")
	v2 := child(t, "ready2")
	deliver(t, dir, v2, false)
	if err := os.WriteFile(filepath.Join(dir, "host", spec.VersionsDir, spec.WantFile), []byte("./"+v2.digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path})
	poll.Until(t, 20*time.Second, "the own executable good", func() error {
		l := readLaunch(t, dir)
		if l.Good == self.digest && l.Running == self.digest {
			return nil
		}
		return fmt.Errorf("%+v", l)
	})
	if l := readLaunch(t, dir); len(l.Bad) != 0 {
		t.Errorf("bad %+v, want none: an ignored want marks nothing", l.Bad)
	}
	if strings.Contains(children(dir), "start ready2") {
		t.Errorf("the version a bad want file points at ran:\n%s", children(dir))
	}
}

// A ready child that exits for another reason ends the launcher with its
// status; the version of last resort exiting before it is ready does too,
// and is not marked bad (there is nothing to fall back to).
func TestChildExitEndsTheLauncher(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		behaviour string
		code      int
		good      bool
	}{{"fail", 9, true}, {"exit", 1, false}} {
		t.Run(tc.behaviour, func(t *testing.T) {
			t.Parallel()
			dir := newDir(t)
			self := child(t, tc.behaviour)
			r := start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path})
			err := r.ended(t, 20*time.Second)
			var exit *launch.ExitError
			if !errors.As(err, &exit) || exit.Code != tc.code {
				t.Fatalf("Run: %v, want the child's status %d", err, tc.code)
			}
			l := readLaunch(t, dir)
			if len(l.Bad) != 0 || (l.Good == self.digest) != tc.good {
				t.Errorf("record %+v: want no bad version, good %v", l, tc.good)
			}
		})
	}
}

// The launcher's stop reaches the child as SIGTERM, and the launcher waits
// for it.
func TestStopReachesTheChild(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	self := child(t, "ready")
	r := start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path})
	poll.Until(t, 20*time.Second, "ready", func() error {
		if readLaunch(t, dir).Good != "" {
			return nil
		}
		return errors.New(children(dir))
	})
	r.cancel()
	if err := r.ended(t, 20*time.Second); err != nil {
		t.Fatalf("Run after a stop: %v", err)
	}
	if !strings.Contains(children(dir), "terminated ready") {
		t.Errorf("the child was not told to stop before the launcher returned:\n%s", children(dir))
	}
}

// A wanted version whose bytes do not hash to its name is never run: it
// is marked bad, so its node does not stand aside for it again.
func TestIncompleteVersionIsNeverRun(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	self := child(t, "ready")
	v2 := child(t, "ready2")
	deliver(t, dir, v2, true)
	bin := filepath.Join(dir, "host", spec.VersionsDir, v2.digest, spec.VersionBinary)
	body, _ := os.ReadFile(bin)
	if err := os.WriteFile(bin, body[:len(body)/2], 0o755); err != nil {
		t.Fatal(err)
	}
	start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path})
	poll.Until(t, 20*time.Second, "the own executable good", func() error {
		l := readLaunch(t, dir)
		if l.Good == self.digest {
			return nil
		}
		return fmt.Errorf("%+v", l)
	})
	l := readLaunch(t, dir)
	if f, ok := l.Bad[v2.digest]; !ok || !strings.Contains(f.Reason, "not to the digest it is delivered as") {
		t.Errorf("bad %+v, want the truncated version with its reason", l.Bad)
	}
	if strings.Contains(children(dir), "start ready2") {
		t.Errorf("the truncated version ran:\n%s", children(dir))
	}
}

// A controller's version that migrates the store and then fails: the
// launcher falls back and the store is as it was before that version ran,
// its integrity checked.
func TestControllerStoreRestoredOnFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := newDir(t)
	dbPath := filepath.Join(dir, "controller", "mesh.db")
	if err := os.MkdirAll(filepath.Dir(dbPath), 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddCADomain(ctx, "example.org", time.Now()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	self := child(t, "ready")
	v3 := child(t, "migrate")
	deliver(t, dir, v3, true)
	start(t, launch.Config{Dir: dir, Mode: launch.Controller, Self: self.path})
	poll.Until(t, 20*time.Second, "fallen back", func() error {
		l := readLaunch(t, dir)
		if l.Good == self.digest && l.Bad[v3.digest].Reason != "" {
			return nil
		}
		return fmt.Errorf("%+v\n%s", l, children(dir))
	})
	if !strings.Contains(children(dir), ": <nil>") {
		t.Fatalf("the failing version did not migrate the store:\n%s", children(dir))
	}
	raw, err := sql.Open("sqlite", store.DSN(dbPath))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var ok string
	if err := raw.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Errorf("integrity_check %q, %v", ok, err)
	}
	var n int
	if err := raw.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name = 'v2_things'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the failed version's table is in the store (%d, %v)", n, err)
	}
	if err := raw.QueryRow(`SELECT count(*) FROM ca_domains`).Scan(&n); err != nil || n != 1 {
		t.Errorf("the rows from before: %d, %v", n, err)
	}
	if _, err := os.Stat(dbPath + ".before-" + v3.digest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the snapshot is left after the restore: %v", err)
	}
	if _, err := os.Stat(dbPath + ".put-back"); err != nil {
		t.Errorf("the store is not marked put back: %v", err)
	}
}

// kill -9 the launcher: its child dies with it, and the next start runs
// the same version.
func TestKilledLauncherTakesItsChildAndComesBackTheSame(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	launcher := builds.Binary(t, gobuild.Build{Dir: "testdata/launcher", GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, LDFlags: "-s -w"})
	self := child(t, "ready")
	v2 := child(t, "ready2")
	deliver(t, dir, v2, true)
	for round := range 2 {
		cmd := exec.Command(launcher, dir, launch.Host, self.path)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var pid int
		poll.Until(t, 20*time.Second, "v2 running", func() error {
			l := readLaunch(t, dir)
			pid = lastStart(children(dir), "ready2")
			if l.Good == v2.digest && l.Running == v2.digest && pid > 0 && strings.Count(children(dir), "start ready2") == round+1 {
				return nil
			}
			return fmt.Errorf("%+v\n%s", l, children(dir))
		})
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		cmd.Process.Kill()
		cmd.Wait()
		poll.Until(t, 10*time.Second, "the child gone with its launcher", func() error {
			if syscall.Kill(pid, 0) != nil || zombie(pid) {
				return nil
			}
			return fmt.Errorf("pid %d still there", pid)
		})
	}
	if strings.Contains(children(dir), "start ready ") {
		t.Errorf("a start after kill -9 ran another version:\n%s", children(dir))
	}
}

func lastStart(log, behaviour string) int {
	pid := 0
	for _, line := range strings.Split(log, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == "start" && f[1] == behaviour {
			pid, _ = strconv.Atoi(f[2])
		}
	}
	return pid
}

// zombie says whether pid has exited and waits for its parent to reap it.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// Another process on the state directory (it holds D/.lock beyond the
// wait for a killed launcher's child): the launcher starts nothing, says
// who holds it, and calls no version bad.
func TestAnotherProcessOnTheDirectoryStartsNothing(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	release, err := statedir.Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	self := child(t, "ready")
	v2 := child(t, "ready2")
	deliver(t, dir, v2, true)
	r := start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path, LockWait: 200 * time.Millisecond})
	err = r.ended(t, 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), "another mesh process runs on "+dir) {
		t.Fatalf("Run: %v, want the directory named as another process's", err)
	}
	if l := readLaunch(t, dir); len(l.Bad) != 0 || l.Good != "" {
		t.Errorf("record %+v, want nothing called good or bad", l)
	}
	if log := children(dir); log != "" {
		t.Errorf("children started:\n%s", log)
	}
}

// The resolver's address is bound once by the launcher and its sockets
// handed to each child (descriptors 4 and 5, named in MESH_DNS_HELD); a
// port 0 is the port the launcher got, and the child is told it in place
// of the --dns it was given.
func TestResolverAddressHeldAndHanded(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	self := child(t, "ready")
	start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path, DNS: "127.0.0.1:0", Args: []string{"--dns=127.0.0.1:0", "--heartbeat=1s"}})
	poll.Until(t, 20*time.Second, "ready", func() error {
		if readLaunch(t, dir).Good != "" {
			return nil
		}
		return errors.New(children(dir))
	})
	var dns, held string
	for _, line := range strings.Split(children(dir), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[0] == "start" {
			for _, a := range f {
				if v, ok := strings.CutPrefix(a, "--dns="); ok {
					dns = v
				}
			}
		}
		if len(f) == 3 && f[0] == "held" {
			held = f[2]
		}
	}
	if dns == "" || strings.HasSuffix(dns, ":0") || held != dns+",4,5" {
		t.Fatalf("the child was given --dns=%s and MESH_DNS_HELD=%s; want the port the launcher bound, and its sockets at 4 and 5:\n%s", dns, held, children(dir))
	}
	// The launcher holds it: nothing else can bind it.
	if _, _, err := resolver.Bind(dns); err == nil {
		t.Errorf("%s is free while the launcher runs", dns)
	}
}

// kill -9 the launcher at every point of a swap, looped: the wanted
// version changes, and the launcher is killed a little later each round,
// from before its child has seen the change to after the new one is up.
// Each next start runs a whole version (the one it ran or the one wanted,
// never the launcher's own fallback nor a version marked bad for a crash
// that was not the version's), its record still reads, and the swap
// finishes.
func TestKilledMidSwapComesBackWhole(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	launcher := builds.Binary(t, gobuild.Build{Dir: "testdata/launcher", GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, LDFlags: "-s -w"})
	self := child(t, "ready")
	pair := [2]version{child(t, "ready2"), child(t, "ready3")}
	names := map[string]string{pair[0].digest: "ready2", pair[1].digest: "ready3"}
	deliver(t, dir, pair[1], false)
	deliver(t, dir, pair[0], true)
	const rounds = 12
	for round := range rounds {
		from, to := pair[round%2], pair[(round+1)%2]
		before := len(children(dir))
		cmd := exec.Command(launcher, dir, launch.Host, self.path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Up in this round: started by this launcher, ready, and running.
		poll.Until(t, 20*time.Second, "round "+strconv.Itoa(round)+": "+names[from.digest]+" running", func() error {
			l := readLaunch(t, dir)
			pid := lastStart(children(dir)[before:], names[from.digest])
			if l.Good == from.digest && l.Running == from.digest && pid > 0 && syscall.Kill(pid, 0) == nil && !zombie(pid) {
				return nil
			}
			return fmt.Errorf("%+v\n%s", l, children(dir))
		})
		want(t, dir, to.digest)
		appendLog(dir, fmt.Sprintf("round %d want %s", round, names[to.digest]))
		// The kill point moves through the swap (0 to 40 ms, twice): the
		// child looks at want every 20 ms and stands aside, the launcher
		// starts the next, which says ready. The sleep places the kill,
		// under test; it waits for nothing.
		time.Sleep(time.Duration(round%6) * 8 * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()
		appendLog(dir, "killed")
		poll.Until(t, 10*time.Second, "the children gone with their launcher", func() error {
			for _, v := range pair {
				if p := lastStart(children(dir), names[v.digest]); p > 0 && syscall.Kill(p, 0) == nil && !zombie(p) {
					return fmt.Errorf("%s (pid %d) still runs", names[v.digest], p)
				}
			}
			return nil
		})
		if l := readLaunch(t, dir); len(l.Bad) != 0 {
			t.Fatalf("round %d: a kill mid-swap marked a version bad: %+v", round, l.Bad)
		}
		// The next round's start finishes this swap: it waits for "to".
	}
	for _, line := range strings.Split(children(dir), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "start" && f[1] == "ready" {
			t.Errorf("the launcher's own executable ran after a kill mid-swap:\n%s", children(dir))
			break
		}
	}
	for _, v := range pair {
		if d, err := release.Digest(filepath.Join(dir, "host", spec.VersionsDir, v.digest, spec.VersionBinary)); err != nil || d != v.digest {
			t.Errorf("version %s on disk hashes to %s (%v)", names[v.digest], d, err)
		}
	}
}

// want names digest the wanted version as the binary resource does: a
// whole file renamed into place.
func want(t *testing.T, dir, digest string) {
	t.Helper()
	versions := filepath.Join(dir, "host", spec.VersionsDir)
	tmp := filepath.Join(versions, ".want.tmp")
	if err := os.WriteFile(tmp, []byte(digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(versions, spec.WantFile)); err != nil {
		t.Fatal(err)
	}
}

// appendLog adds the test's own line to D/children.log, between the
// children's.
func appendLog(dir, line string) {
	f, _ := os.OpenFile(filepath.Join(dir, "children.log"), os.O_APPEND|os.O_WRONLY, 0)
	fmt.Fprintln(f, line)
	f.Close()
}

// A version marked bad is tried again once for each retry count a
// resumed roll asks (D/host/versions/retry): the running child stands aside
// for it, the launcher clears the mark and records the count; it fails
// again and is marked bad again, and neither a restart nor the same count
// tries it a third time; a higher count does.
func TestRetryTriesABadVersionOncePerCount(t *testing.T) {
	t.Parallel()
	dir := newDir(t)
	self := child(t, "ready")
	v3 := child(t, "exit")
	deliver(t, dir, v3, true)
	starts := func() int { return strings.Count(children(dir), "start exit ") }
	r := start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path})
	poll.Until(t, 20*time.Second, "v3 marked bad, the own executable good", func() error {
		l := readLaunch(t, dir)
		if l.Good == self.digest && l.Bad[v3.digest].Reason != "" {
			return nil
		}
		return fmt.Errorf("%+v\n%s", l, children(dir))
	})
	if n := starts(); n != 1 {
		t.Fatalf("v3 started %d times, want once:\n%s", n, children(dir))
	}

	retry := func(n int) {
		t.Helper()
		versions := filepath.Join(dir, "host", spec.VersionsDir)
		tmp := filepath.Join(versions, ".retry.tmp")
		if err := os.WriteFile(tmp, spec.Retry{Digest: v3.digest, Count: n}.Encode(), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(versions, spec.RetryFile)); err != nil {
			t.Fatal(err)
		}
	}
	retry(1)
	poll.Until(t, 20*time.Second, "v3 tried again for retry 1", func() error {
		l := readLaunch(t, dir)
		if starts() == 2 && l.Retried[v3.digest] == 1 && l.Bad[v3.digest].Reason != "" && l.Good == self.digest &&
			strings.Count(children(dir), "start ready ") == 2 {
			return nil
		}
		return fmt.Errorf("%+v\n%s", l, children(dir))
	})

	// A restart with the same count: v3 stays bad.
	r.cancel()
	if err := r.ended(t, 20*time.Second); err != nil {
		t.Fatalf("Run after a stop: %v", err)
	}
	start(t, launch.Config{Dir: dir, Mode: launch.Host, Self: self.path})
	poll.Until(t, 20*time.Second, "the own executable again", func() error {
		if strings.Count(children(dir), "start ready ") == 3 {
			return nil
		}
		return errors.New(children(dir))
	})
	retry(2)
	poll.Until(t, 20*time.Second, "v3 tried again for retry 2", func() error {
		l := readLaunch(t, dir)
		if starts() == 3 && l.Retried[v3.digest] == 2 && l.Bad[v3.digest].Reason != "" {
			return nil
		}
		return fmt.Errorf("%+v\n%s", l, children(dir))
	})
	if n := starts(); n != 3 {
		t.Errorf("v3 started %d times, want 3 (once, and once per retry):\n%s", n, children(dir))
	}
}
