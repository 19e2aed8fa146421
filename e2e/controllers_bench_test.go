package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
)

// idleFor is how long the controllers are left with nothing to do
// before their resident memory is read.
const idleFor = 20 * time.Second

// BenchmarkControllersFailover runs three controller processes on
// loopback (newControllers) with one host, and first reads each
// controller's resident memory, its process and its children's, once
// it was left idleFor after a push (ctl-idle-MiB: the largest; each is
// logged), beside a single controller's with one host, measured the
// same way at the same time (one-idle-MiB, and the ratio ctl/one-idle).
// Each op then kills the leader with SIGKILL and times from
// the kill to the first push through another controller that succeeds
// (failover-p50-ms, failover-max-ms, over the ops), and runs the killed
// controller again with no flag, waiting until one leads. bench/
// controllers.sh runs it.
//
//	go test -run '^$' -bench ControllersFailover -benchtime 5x -timeout 30m ./e2e
func BenchmarkControllersFailover(b *testing.B) {
	c := newControllers(b, 1)
	c.pushText(b, 0, "v0", 60*time.Second)
	c.converged(b, 0, "v0", 30*time.Second)
	one := newOneController(b, 1)
	one.pushText(b, 0, "v0", 60*time.Second)
	one.converged(b, 0, "v0", 30*time.Second)
	// Nothing to wait for but time: the memory of controllers that have
	// been idle.
	time.Sleep(idleFor)
	most := 0
	for i, d := range c.ds {
		kib := treeKiB(b, d.cmd.Process.Pid, "VmRSS")
		b.Logf("%s idle: %.1f MiB resident", c.nodes[i], float64(kib)/1024)
		most = max(most, kib)
	}
	single := treeKiB(b, one.ds[0].cmd.Process.Pid, "VmRSS")
	b.Logf("a single controller idle: %.1f MiB resident; load average %s", float64(single)/1024, loadAverage())
	// Stopped: it would share the cores with the failovers timed.
	one.hosts[0].d.stop(b)
	one.ds[0].stop(b)

	var took []time.Duration
	var loads []string
	// b.Loop runs this function once, not again with a larger b.N: one
	// cluster for every kill.
	for n := 0; b.Loop(); n++ {
		lead := c.leader(b, 60*time.Second)
		other := (lead + 1) % 3
		killed := time.Now()
		c.kill(b, lead)
		text := fmt.Sprintf("v%d", n+1)
		c.pushText(b, other, text, 90*time.Second)
		took = append(took, time.Since(killed))
		loads = append(loads, loadAverage())
		b.StopTimer()
		c.converged(b, other, text, 30*time.Second)
		c.restart(b, lead)
		c.leader(b, 60*time.Second)
		b.StartTimer()
	}
	b.StopTimer()
	b.Logf("failover, the leader killed to a push through another: %v; the load average at each: %v", took, loads)
	b.ReportMetric(float64(quantile(took, 50).Milliseconds()), "failover-p50-ms")
	b.ReportMetric(float64(quantile(took, 100).Milliseconds()), "failover-max-ms")
	// Reported after the loop: its start clears what was reported before.
	b.ReportMetric(float64(most)/1024, "ctl-idle-MiB")
	b.ReportMetric(float64(single)/1024, "one-idle-MiB")
	b.ReportMetric(float64(most)/float64(single), "ctl/one-idle")
	c.checkSeqs(b)
}

// treeKiB is a field of /proc/PID/status, in KiB, summed over pid and
// every process under it (mesh controller is a launcher, its child the
// controller).
func treeKiB(b testing.TB, pid int, field string) int {
	total := procKiB(b, pid, field)
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		body, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		for _, kid := range strings.Fields(string(body)) {
			if child, err := strconv.Atoi(kid); err == nil {
				total += treeKiB(b, child, field)
			}
		}
	}
	return total
}

// newOneController is newControllers with a single controller, started
// without --cluster: a mesh as it runs on one machine.
func newOneController(t testing.TB, hosts int) *ctlCluster {
	t.Helper()
	m := newMesh(t)
	c := &ctlCluster{dirs: []string{m.dir}, nodes: []string{m.node}, ds: []*daemon{m.d}}
	mod := filepath.Join(t.TempDir(), "note")
	os.MkdirAll(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "module.json"), []byte(noteModule), 0o644)
	mustRun(t, "module", "register", "--dir", m.dir, mod)
	for i := range hosts {
		node := fmt.Sprintf("h%d", i+1)
		root := t.TempDir()
		dir, d := m.join(t, node, "--root", root)
		mustRun(t, "assign", "--dir", m.dir, "--set", "text=first", "note", node)
		c.hosts = append(c.hosts, ctlHost{node: node, dir: dir, root: root, d: d, seqs: watchSeqs(t, dir)})
	}
	return c
}

// BenchmarkControllersFleetPush pushes to a fleet of simulated hosts
// (newFleet: real agents in this process, their state on tmpfs), 1,000
// unless MESH_BENCH_FLEET says another size, run against a single
// controller ("one") and then against three controllers on loopback
// ("three": genesis with --cluster and two that joined it, each a
// process of its own; the hosts spread over the three buses by their
// client's random pick among the addresses they were given, the
// operator on the leader's bus). Each op is a new version of module
// motd pushed to every host, timed from the request to the last
// host's report (change-p50-ms, change-max-ms) and to the push's reply
// (reply-p50-ms). The ratio of the two medians, three to one, is
// logged at the end.
//
//	go test -run '^$' -bench ControllersFleetPush -benchtime 5x -timeout 60m ./e2e
func BenchmarkControllersFleetPush(b *testing.B) {
	nodes := 1000
	if env := os.Getenv("MESH_BENCH_FLEET"); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n < 1 || n > 5000 {
			b.Fatalf("MESH_BENCH_FLEET=%q: want one fleet size from 1 to 5000", env)
		}
		nodes = n
	}
	medians := map[string]time.Duration{}
	b.Run("one", func(b *testing.B) {
		medians["one"] = benchFleetChanges(b, newFleet(b, nodes))
	})
	b.Run("three", func(b *testing.B) {
		medians["three"] = benchFleetChanges(b, newClusterFleet(b, nodes))
	})
	if medians["one"] > 0 && medians["three"] > 0 {
		b.Logf("%d hosts, a change to every host to the last report, median: one controller %s, three %s, three/one %.2f",
			nodes, medians["one"].Round(time.Millisecond), medians["three"].Round(time.Millisecond),
			float64(medians["three"])/float64(medians["one"]))
	}
}

// benchFleetChanges times changes to every host of f (each op one), and
// returns the median to the last report.
func benchFleetChanges(b *testing.B, f *fleet) time.Duration {
	nodes := len(f.nodes)
	b.Logf("%d hosts joined in %s, assigned in %s", nodes, f.joined.Round(time.Millisecond), f.assigned.Round(time.Millisecond))
	// The first push: every host takes the roster it lacks besides.
	f.push(b, false)
	var change, reply []time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		f.registerMotd(b, strconv.Itoa(i+2))
		b.StartTimer()
		p := f.push(b, false)
		b.StopTimer()
		if p.sent != nodes {
			b.Fatalf("a change to motd sent to %d nodes, want %d", p.sent, nodes)
		}
		if bad := p.failed(); len(bad) > 0 {
			b.Fatalf("a change to motd failed: %s", strings.Join(bad, "; "))
		}
		change, reply = append(change, p.last), append(reply, p.replied)
		b.Logf("a change to %d hosts: replied %s, the last report %s, load average %s", nodes,
			p.replied.Round(time.Millisecond), p.last.Round(time.Millisecond), loadAverage())
		b.StartTimer()
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(quantile(change, 50)), "change-p50-ms")
	b.ReportMetric(ms(quantile(change, 100)), "change-max-ms")
	b.ReportMetric(ms(quantile(reply, 50)), "reply-p50-ms")
	return quantile(change, 50)
}

// newClusterFleet is newFleet against three controllers: genesis with
// --cluster, two controllers joined to it, and then the hosts, which
// the operator (f.dir, f.ctl) joins through the leader's bus.
func newClusterFleet(b *testing.B, nodes int) *fleet {
	b.Helper()
	raiseOpenFiles(b, uint64(4*nodes+4096))
	f := &fleet{dir: filepath.Join(b.TempDir(), "ctl"), pprof: port(b)}
	f.ctl = start(b, "genesis", "--dir", f.dir, "--mesh", "fleet", "--node", "ctl", "--bus", port(b), "--http", port(b),
		"--dns", port(b), "--dns-upstream", deadUpstream, "--address", "127.0.0.1", "--root", b.TempDir(),
		"--docker", "none", "--log-level", "warn", "--pprof", f.pprof, "--cluster", port(b))
	waitReady(b, f.ctl, f.dir)
	c := &ctlCluster{dirs: []string{f.dir}, nodes: []string{"ctl"}, ds: []*daemon{f.ctl}}
	genesis := &testMesh{dir: f.dir}
	for _, node := range []string{"ctl2", "ctl3"} {
		token := genesis.token(b, node, "--controller")
		dir := filepath.Join(b.TempDir(), node)
		d := start(b, "controller", "--join", token, "--dir", dir, "--bus", port(b), "--http", port(b),
			"--cluster", port(b), "--dns", port(b), "--dns-upstream", deadUpstream, "--docker", "none",
			"--address", "127.0.0.1", "--log-level", "warn")
		waitController(b, d, dir)
		c.dirs, c.nodes, c.ds = append(c.dirs, dir), append(c.nodes, node), append(c.ds, d)
	}
	// Settled: the leader runs the mesh's controller (which makes the
	// declaration stream with the three replicas) once a push succeeds.
	poll.Until(b, 90*time.Second, "a push through the three controllers", func() error {
		if _, errOut, code := runMesh(b, "push", "--dir", c.dirs[0], "--wait", "20s"); code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		return nil
	})
	lead := c.leader(b, 60*time.Second)
	f.dir, f.ctl = c.dirs[lead], c.ds[lead]
	if a, ok := readAddrsFile(b, f.dir); ok {
		f.addrs = a
	}
	f.joinHosts(b, nodes)
	var spread []string
	for i, dir := range c.dirs {
		a, _ := readAddrsFile(b, dir)
		spread = append(spread, fmt.Sprintf("%s %d", c.nodes[i], connectionsTo(b, a.Bus)))
	}
	b.Logf("%s leads; connections to each bus: %s", c.nodes[lead], strings.Join(spread, ", "))
	return f
}

// connectionsTo counts this process's established TCP connections to
// addr (host:port, or a nats URL), by its port: the simulated hosts'
// and the operator's.
func connectionsTo(b testing.TB, addr string) int {
	port, err := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	if err != nil {
		b.Fatalf("the port of %q: %v", addr, err)
	}
	body, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", os.Getpid()))
	if err != nil {
		b.Fatal(err)
	}
	mine := map[string]bool{}
	fds, _ := filepath.Glob("/proc/self/fd/*")
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, line := range strings.Split(string(body), "\n")[1:] {
		f := strings.Fields(line)
		// local, remote (hex address:port), state (01 established), ..., inode
		if len(f) < 10 || f[3] != "01" || !mine[f[9]] {
			continue
		}
		if p, err := strconv.ParseInt(f[2][strings.IndexByte(f[2], ':')+1:], 16, 32); err == nil && int(p) == port {
			n++
		}
	}
	return n
}

// loadAverage is this machine's load average over the last minute.
func loadAverage() string {
	body, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(body))[0]
}
