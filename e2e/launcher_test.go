package e2e

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/gobuild"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/miekg/dns"
)

// deliverVersion puts bin where the binary resource puts a delivered
// version, D/host/versions/<digest>/mesh, then names it in want, in that
// order, and returns its digest.
func deliverVersion(t *testing.T, dir, bin string) string {
	t.Helper()
	digest, err := release.Digest(bin)
	if err != nil {
		t.Fatal(err)
	}
	versions := filepath.Join(dir, "host", spec.VersionsDir)
	body, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(versions, digest), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(versions, digest, spec.VersionBinary), body, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(versions, spec.WantFile), []byte(digest+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return digest
}

func launchRecord(t *testing.T, dir string) spec.Launch {
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

// serveChild is the process a launcher runs on dir (mesh serve MODE --dir
// dir), and the file it runs from; pid 0 when there is none.
func serveChild(t *testing.T, mode, dir string) (pid int, exe string) {
	t.Helper()
	want := []byte("serve\x00" + mode + "\x00--dir\x00" + dir + "\x00")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, want) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:])); len(f) > 0 && f[0] == "Z" {
				continue // exited, not yet reaped
			}
		}
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		return p, exe
	}
	return 0, ""
}

// launched has m's controller run by a launcher: genesis serves in its
// own process, so it is stopped and mesh controller runs the mesh again.
func (m *testMesh) launched(t *testing.T) {
	t.Helper()
	m.d.stop(t)
	m.d = start(t, "controller", "--dir", m.dir)
	waitReady(t, m.d, m.dir)
}

// hangs is a program that never says it is ready: it waits for a signal.
func hangs(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(binDir, "hangs")
	os.MkdirAll(dir, 0o755)
	for name, body := range map[string]string{
		"go.mod":  "module example.com/hangs\n\ngo 1.26\n",
		"main.go": "package main\n\nimport \"time\"\n\nfunc main() { time.Sleep(time.Hour) }\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return builds.Binary(t, gobuild.Build{Dir: dir, GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, LDFlags: "-s -w"})
}

// TestLauncherRunsTheWantedVersionAndFallsBack: mesh host is a launcher.
// A version delivered and wanted has the running host stand aside after
// its next pass, and the launcher run it from versions/<digest>/mesh: the
// node reports that digest. A version that exits at start, and one never
// ready, are marked bad with why, and the last good one runs again. kill -9
// the launcher: its child goes with it, and the next start runs the same
// version; SIGINT reaches the child and the launcher exits 0 after it.
func TestLauncherRunsTheWantedVersionAndFallsBack(t *testing.T) {
	optin.NeedSlow(t, "runs real mesh builds through a launcher and its deadlines")
	t.Parallel()
	m := newMesh(t)
	betaDir, beta := join(t, m.token(t, "beta"), "--reconcile", "1s", "--healthy-within", "5s")
	own, err := release.Digest(meshBin)
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "beta reports the launcher's own version", func() error {
		n := nodeShow(t, m.dir, "beta")
		if n.HostVersion == own {
			return nil
		}
		return errors.New(n.HostVersion)
	})

	v2 := deliverVersion(t, betaDir, meshRelease(t, "meshrel-v2"))
	poll.Until(t, 30*time.Second, "beta runs v2", func() error {
		n := nodeShow(t, m.dir, "beta")
		l := launchRecord(t, betaDir)
		if n.HostVersion == v2 && l.Good == v2 && l.Running == v2 {
			return nil
		}
		return fmt.Errorf("reports %s, record %+v", n.HostVersion, l)
	})
	pid, exe := serveChild(t, "host", betaDir)
	if want := filepath.Join(betaDir, "host", spec.VersionsDir, v2, spec.VersionBinary); pid == 0 || exe != want {
		t.Fatalf("beta's child %d runs from %q, want %s", pid, exe, want)
	}
	if !strings.Contains(beta.out.String(), "standing aside") {
		t.Errorf("the host did not say it stood aside:\n%s", beta.out.String())
	}

	for _, bad := range []struct {
		name, bin, reason string
	}{
		{"exits at start", builds.Binary(t, gobuild.Build{Dir: builds.Program(t, "example.com/exits"), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, LDFlags: "-s -w"}),
			"exited with status 0 before it was ready"},
		{"never ready", hangs(t), "not ready within 5s"},
	} {
		d := deliverVersion(t, betaDir, bad.bin)
		poll.Until(t, 40*time.Second, bad.name+": marked bad, v2 back", func() error {
			l := launchRecord(t, betaDir)
			pid, exe := serveChild(t, "host", betaDir)
			if l.Bad[d].Reason == bad.reason && l.Running == v2 && l.Good == v2 && pid != 0 && strings.Contains(exe, v2) {
				return nil
			}
			return fmt.Errorf("record %+v, child %d %s", l, pid, exe)
		})
		since := time.Now()
		poll.Until(t, 20*time.Second, bad.name+": beta heard on v2", func() error {
			n := nodeShow(t, m.dir, "beta")
			if n.LastHeard != nil && n.LastHeard.After(since) && n.HostVersion == v2 {
				return nil
			}
			return fmt.Errorf("%v %s", n.LastHeard, n.HostVersion)
		})
	}

	pid, _ = serveChild(t, "host", betaDir)
	beta.kill9(t)
	poll.Until(t, 10*time.Second, "the child gone with its launcher", func() error {
		p, _ := serveChild(t, "host", betaDir)
		if p == 0 {
			return nil
		}
		return fmt.Errorf("child %d (was %d) still runs", p, pid)
	})
	again := start(t, "host", "--dir", betaDir)
	poll.Until(t, 30*time.Second, "the same version after kill -9", func() error {
		again.alive(t)
		p, exe := serveChild(t, "host", betaDir)
		if p != 0 && p != pid && strings.Contains(exe, v2) {
			return nil
		}
		return fmt.Errorf("child %d from %s", p, exe)
	})
	since := time.Now()
	poll.Until(t, 20*time.Second, "beta heard on v2 after kill -9", func() error {
		n := nodeShow(t, m.dir, "beta")
		if n.LastHeard != nil && n.LastHeard.After(since) && n.HostVersion == v2 {
			return nil
		}
		return fmt.Errorf("%v %s", n.LastHeard, n.HostVersion)
	})

	again.cmd.Process.Signal(syscall.SIGINT)
	if code := again.exited(t, 30*time.Second); code != 0 {
		t.Fatalf("the launcher exited %d after SIGINT:\n%s", code, again.out.String())
	}
	if p, _ := serveChild(t, "host", betaDir); p != 0 {
		t.Fatalf("the child %d runs on after its launcher stopped", p)
	}
	if !strings.Contains(again.out.String(), "stopping") {
		t.Errorf("the child was not stopped cleanly:\n%s", again.out.String())
	}
}

// TestControllerFallbackRestoresTheStore: on a controller's machine, a
// delivered version runs after the controller stands aside, its store
// copied before it runs and the copy dropped once it is ready; a version
// that migrates the store (a table of its own) and then exits is marked
// bad, the store put back as it was, and the good version serves it: the
// integrity check passes, the table is gone, the CLI reads the nodes.
func TestControllerFallbackRestoresTheStore(t *testing.T) {
	optin.NeedSlow(t, "runs a migrating mesh build through a launcher and its deadline")
	t.Parallel()
	m := newMesh(t, "--reconcile", "1s", "--healthy-within", "20s")
	m.launched(t)
	v2 := deliverVersion(t, m.dir, meshRelease(t, "meshrel-v2"))
	poll.Until(t, 40*time.Second, "the controller runs v2", func() error {
		l := launchRecord(t, m.dir)
		if l.Good != v2 {
			return fmt.Errorf("record %+v", l)
		}
		if err := healthy(m.addrs.HTTP); err != nil {
			return err
		}
		n := nodeShow(t, m.dir, "alpha")
		if n.HostVersion == v2 {
			return nil
		}
		return errors.New(n.HostVersion)
	})
	db := filepath.Join(m.dir, "controller", "mesh.db")
	if _, err := os.Stat(db + ".before-" + v2); !os.IsNotExist(err) {
		t.Errorf("the store's copy is kept after v2 is ready: %v", err)
	}
	if addrs, _ := readAddrsFile(t, m.dir); addrs.Bus != m.addrs.Bus {
		t.Errorf("the bus moved from %s to %s across the swap", m.addrs.Bus, addrs.Bus)
	}

	migrates := builds.Binary(t, gobuild.Build{Dir: "../launch/testdata/child", GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, LDFlags: "-s -w -X main.behaviour=migrate"})
	v3 := deliverVersion(t, m.dir, migrates)
	poll.Until(t, 40*time.Second, "v3 bad, v2 back", func() error {
		l := launchRecord(t, m.dir)
		pid, exe := serveChild(t, "controller", m.dir)
		if l.Bad[v3].Reason == "exited with status 1 before it was ready" && l.Running == v2 && pid != 0 && strings.Contains(exe, v2) {
			return nil
		}
		return fmt.Errorf("record %+v, child %d %s", l, pid, exe)
	})
	if log, _ := os.ReadFile(filepath.Join(m.dir, "children.log")); !strings.Contains(string(log), ": <nil>") {
		t.Fatalf("v3 did not migrate the store:\n%s", log)
	}
	since := time.Now()
	poll.Until(t, 30*time.Second, "alpha heard on v2 again", func() error {
		if err := healthy(m.addrs.HTTP); err != nil {
			return err
		}
		n := nodeShow(t, m.dir, "alpha")
		if n.LastHeard != nil && n.LastHeard.After(since) && n.HostVersion == v2 {
			return nil
		}
		return fmt.Errorf("%v %s", n.LastHeard, n.HostVersion)
	})
	raw, err := sql.Open("sqlite", store.DSN(db))
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
	if _, err := os.Stat(db + ".before-" + v3); !os.IsNotExist(err) {
		t.Errorf("the store's copy is left after the restore: %v", err)
	}
	if names := m.nodeNames(t); !strings.Contains(names, "alpha") {
		t.Errorf("the nodes after the restore: %s", names)
	}
}

// TestResolverAnswersThroughASwap: the launcher holds the machine's
// resolver address (from its second start on, when D/config.yaml names
// its port) and hands its sockets to each child: while the host stands
// aside for a delivered version and that version starts, every query to
// the machine's resolver is answered, with the names the host keeps. The
// longest a query waited is logged.
func TestResolverAnswersThroughASwap(t *testing.T) {
	optin.NeedSlow(t, "swaps a host to another mesh build under queries")
	t.Parallel()
	m := newMesh(t, "--root", t.TempDir())
	betaDir, beta := join(t, m.token(t, "beta"), "--reconcile", "1s", "--root", t.TempDir())
	mustRun(t, "module", "register", "--dir", m.dir, fileModule(t, "swapnames", "/etc/swapnames", "x"))
	mustRun(t, "assign", "--dir", m.dir, "swapnames", "beta")
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("push: exit %d %+v", code, o)
	}
	beta.stop(t)
	beta = start(t, "host", "--dir", betaDir)
	addr := dnsAddr(t, betaDir)
	poll.Until(t, 20*time.Second, "beta's resolver back", func() error {
		beta.alive(t)
		r, err := ask(t, addr, "beta.internal", dns.TypeA)
		if err != nil {
			return err
		}
		if answers(r) == "127.0.0.2" {
			return nil
		}
		return fmt.Errorf("answered %v", r)
	})
	since := time.Now()
	poll.Until(t, 20*time.Second, "beta back", func() error {
		return heardAfter(t, m.dir, "beta", since)
	})

	type result struct {
		took time.Duration
		err  string
	}
	stop, results := make(chan struct{}), make(chan result, 100000)
	go func() {
		defer close(results)
		for {
			select {
			case <-stop:
				return
			default:
			}
			q := new(dns.Msg)
			q.SetQuestion("beta.internal.", dns.TypeA)
			c := &dns.Client{Net: "udp", Timeout: 10 * time.Second}
			at := time.Now()
			r, _, err := c.Exchange(q, addr)
			res := result{took: time.Since(at)}
			switch {
			case err != nil:
				res.err = err.Error()
			case answers(r) != "127.0.0.2":
				res.err = fmt.Sprintf("rcode %s, answers %q", dns.RcodeToString[r.Rcode], answers(r))
			}
			results <- res
			time.Sleep(5 * time.Millisecond) // the queries' pace, not a wait
		}
	}()
	v2 := deliverVersion(t, betaDir, meshRelease(t, "meshrel-v2"))
	poll.Until(t, 30*time.Second, "beta runs v2", func() error {
		n := nodeShow(t, m.dir, "beta")
		if n.HostVersion == v2 {
			return nil
		}
		return errors.New(n.HostVersion)
	})
	close(stop)
	var longest time.Duration
	asked, failed := 0, 0
	for r := range results {
		asked++
		longest = max(longest, r.took)
		if r.err != "" {
			failed++
			t.Errorf("a query during the swap: %s (after %s)", r.err, r.took)
		}
	}
	t.Logf("%d queries during the swap, %d not answered; the longest waited %s", asked, failed, longest)
}
