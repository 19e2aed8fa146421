package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/cli"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// A fleet is a controller, the real binary in its own process, and
// simulated hosts: real agents (host.Agent) run as goroutines of the test's
// process, each joined with its own token and credential, their
// state on tmpfs (/dev/shm when there is one) so that a figure measures
// the mesh and not this machine's disk.
type fleet struct {
	dir    string // the controller's state directory
	ctl    *daemon
	addrs  spec.Addrs
	op     *cli.Operator
	nodes  []string
	hosts  string // the hosts' state directories, one per node
	shm    bool   // the hosts' state is on tmpfs
	pprof  string // where the controller serves its profiles (--pprof)
	cancel context.CancelFunc
	done   chan struct{}

	// motd is what module motd declares besides its file.
	motd motdValues
	// How long each step of making it took.
	joined, assigned time.Duration
	// zones counts the zones the hosts were given to serve (zoneCount):
	// each takes one per roster it holds.
	zones atomic.Int64
	// rosters is shared by the simulated hosts: each roster is held once
	// in this process, as ten thousand machines would each hold it once
	// (held by each simulated host, a large fleet's rosters would not fit
	// in one machine's memory).
	rosters host.RosterPool
}

// zoneCount is a simulated host's resolver: it serves nothing, and counts
// the zones it is given.
type zoneCount struct{ n *atomic.Int64 }

func (z zoneCount) SetZone(resolver.Zone)           { z.n.Add(1) }
func (zoneCount) Attach(string, netip.Prefix) error { return nil }
func (zoneCount) Detach(string) error               { return nil }

// newFleet starts a controller, registers module motd (a file with the
// node's name) and joins nodes simulated hosts, each assigned motd and
// ready (connected, its subscriptions made) when it returns. It is stopped
// when tb ends.
func newFleet(tb testing.TB, nodes int) *fleet { return newFleetWith(tb, nodes, motdValues{}) }

// motdValues are the values module motd gives each node besides its
// file: Files more files, each of its own setting, secret (so sealed to
// each node) when Sealed.
type motdValues struct {
	Files  int
	Sealed bool
}

// newFleetWith is newFleet, its module motd declaring motd besides.
func newFleetWith(tb testing.TB, nodes int, motd motdValues) *fleet {
	tb.Helper()
	raiseOpenFiles(tb, uint64(4*nodes+4096))
	f := &fleet{dir: filepath.Join(tb.TempDir(), "ctl"), pprof: port(tb), motd: motd}
	f.ctl = start(tb, "genesis", "--dir", f.dir, "--mesh", "fleet", "--node", "ctl", "--bus", port(tb), "--http", port(tb),
		"--dns", port(tb), "--dns-upstream", deadUpstream, "--address", "127.0.0.1", "--root", tb.TempDir(),
		"--docker", "none", "--log-level", "warn", "--pprof", f.pprof)
	f.addrs = waitReady(tb, f.ctl, f.dir)
	f.joinHosts(tb, nodes)
	return f
}

// joinHosts dials f's controller as the operator, registers module motd
// and joins nodes simulated hosts, each assigned motd and ready when it
// returns, stopped when tb ends.
func (f *fleet) joinHosts(tb testing.TB, nodes int) {
	tb.Helper()
	f.done = make(chan struct{}, nodes)
	op, err := cli.DialOperator(context.Background(), f.dir)
	if err != nil {
		tb.Fatal(err)
	}
	f.op = op
	tb.Cleanup(op.Close)
	f.registerMotd(tb, "1")

	hosts := tb.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if hosts, err = os.MkdirTemp("/dev/shm", "mesh-fleet-"); err != nil {
			tb.Fatal(err)
		}
		f.shm = true
		tb.Cleanup(func() { os.RemoveAll(hosts) })
	}
	// A simulated host reports the digest of this small file as its
	// version, not of the test binary: hashing that once per host would
	// be most of a join.
	exe := filepath.Join(hosts, "host-version")
	if err := os.WriteFile(exe, []byte("a simulated host\n"), 0o755); err != nil {
		tb.Fatal(err)
	}

	f.hosts = hosts
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	started := 0
	tb.Cleanup(func() {
		cancel()
		for range started {
			<-f.done
		}
	})
	// MESH_BENCH_HOST_LOG=FILE keeps the simulated hosts' warnings and
	// errors, each with its node; else they say nothing.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if file := os.Getenv("MESH_BENCH_HOST_LOG"); file != "" {
		w, err := os.Create(file)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { w.Close() })
		quiet = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	f.nodes = make([]string, nodes)
	for i := range nodes {
		f.nodes[i] = fmt.Sprintf("n%05d", i)
	}

	// One host after another: the controller takes each join in turn, so
	// they would not go faster at once. Each runs as soon as it joined, as
	// mesh host --join does: started all at once after the last join,
	// they would connect in one herd that no fleet meets but at a restart
	// of the controller (which the benchmark times apart).
	begin := time.Now()
	agents := make([]*host.Agent, nodes)
	for i, node := range f.nodes {
		a, err := f.joinOne(ctx, f.hostDir(node), exe, node, quiet.With("node", node))
		if err != nil {
			tb.Fatalf("join %s: %v", node, err)
		}
		agents[i] = a
		started++
		go func() { a.Run(ctx); f.done <- struct{}{} }()
		if i > 0 && i%200 == 0 {
			tb.Logf("%d hosts joined in %s", i, time.Since(begin))
		}
	}
	for _, a := range agents {
		select {
		case <-a.Ready():
		case <-time.After(2 * time.Minute):
			tb.Fatal("a simulated host was not ready within 2m")
		}
	}
	f.joined = time.Since(begin)

	begin = time.Now()
	for _, n := range f.nodes {
		fleetCall(tb, f, spec.Assign, spec.AssignRequest{Module: "motd", Node: n})
	}
	f.assigned = time.Since(begin)
}

// raiseOpenFiles lifts this process's open-file limit to want, before the
// controller is started (it inherits it): each simulated host holds a
// socket (one: busDialer closes a failed try's), and a fleet of
// thousands with the controller's own passes a machine's usual limit.
// Past the hard limit only a process allowed to raise it can (root in a
// container may not be); one that cannot is told what it has.
func raiseOpenFiles(tb testing.TB, want uint64) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur >= want {
		return
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: max(l.Max, want)}); err != nil {
		tb.Logf("open files: %d, not the %d a fleet of this size wants (%v): a restart of the controller may run out", l.Cur, want, err)
	}
}

// metric reads one counter from the controller's /metrics.
func (f *fleet) metric(tb testing.TB, name string) int {
	tb.Helper()
	return (&testMesh{addrs: f.addrs}).metric(tb, name)
}

// hostDir is node's state directory; its root is the directory root in it.
func (f *fleet) hostDir(node string) string { return filepath.Join(f.hosts, node) }

// joinOne creates node's token and joins it in dir.
func (f *fleet) joinOne(ctx context.Context, dir, exe, node string, log *slog.Logger) (*host.Agent, error) {
	tok, err := cli.Call(f.op, spec.TokenCreate, spec.TokenCreateRequest{Node: node})
	if err != nil {
		return nil, fmt.Errorf("token create: %w", err)
	}
	parsed, err := spec.ParseToken(tok.Token)
	if err != nil {
		return nil, err
	}
	if err := host.Join(ctx, host.JoinConfig{Dir: dir, Token: parsed, Address: "127.0.0.1", Now: time.Now()}); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "root"), 0o755); err != nil {
		return nil, err
	}
	return host.New(host.Config{Dir: dir, Root: filepath.Join(dir, "root"), Executable: exe, HeartbeatEvery: 10 * time.Second,
		Names: zoneCount{&f.zones}, Rosters: &f.rosters}, log)
}

// fleetCall makes one API call to f's mesh; an error ends the test.
func fleetCall[Req, Res any](tb testing.TB, f *fleet, v spec.Verb[Req, Res], req Req) Res {
	tb.Helper()
	res, err := cli.Call(f.op, v, req)
	if err != nil {
		tb.Fatalf("%s: %v", v.Name, err)
	}
	return res
}

// registerMotd registers module motd at version, its file's content
// naming the version, so that each version is a change to every node.
func (f *fleet) registerMotd(tb testing.TB, version string) {
	tb.Helper()
	dir := tb.TempDir()
	settings, files := "", ""
	for i := range f.motd.Files {
		settings += fmt.Sprintf(`,{"name":"v%d","type":"string","secret":%v,"default":"value %d of motd, %032d"}`, i, f.motd.Sealed, i, i)
		files += fmt.Sprintf(`,{"file":{"path":"/etc/motd.d/v%d","content":"${v%d} at %s\n"}}`, i, i, version)
	}
	manifest := fmt.Sprintf(`{"name":"motd","version":%q,"settings":[%s],"resources":[{"file":{"path":"/etc/motd","content":"${node} at %s\n"}}%s]}`,
		version, strings.TrimPrefix(settings, ","), version, files)
	if err := os.WriteFile(filepath.Join(dir, spec.ManifestFile), []byte(manifest), 0o644); err != nil {
		tb.Fatal(err)
	}
	if _, errOut, code := runMesh(tb, "module", "register", "--dir", f.dir, dir); code != 0 {
		tb.Fatalf("mesh module register: exit %d: %s", code, errOut)
	}
}

// pushed is one push, as the operator saw it.
type pushed struct {
	res     spec.PushResult
	replied time.Duration // from the request to the push's reply
	last    time.Duration // from the request to the last report of a node it sent to
	sent    int           // nodes sent a declaration
	// reports are the reports of the nodes sent a declaration, by node.
	reports map[string]spec.Report
}

// failed names the reports that refused the declaration or failed a
// resource, with why.
func (p pushed) failed() []string {
	var bad []string
	for node, r := range p.reports {
		if r.Refused != "" {
			bad = append(bad, node+": refused: "+r.Refused)
		}
		for _, res := range r.Results {
			if res.Error != "" {
				bad = append(bad, node+": "+res.Name+": "+res.Error)
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// push pushes to every node (forced when force) and waits until each node
// sent a declaration has reported it. A node the push could not send to
// fails tb.
func (f *fleet) push(tb testing.TB, force bool) pushed {
	tb.Helper()
	progress := spec.OperatorInbox + ".fleet." + strconv.FormatInt(time.Now().UnixNano(), 36)
	events := make(chan *nats.Msg, 2*len(f.nodes)+16)
	sub, err := f.op.Conn().ChanSubscribe(progress, events)
	if err != nil {
		tb.Fatal(err)
	}
	defer sub.Unsubscribe()
	p := pushed{reports: map[string]spec.Report{}}
	start := time.Now()
	// A push to a large fleet may take longer than the verb's 2 minutes
	// to answer: a minute more a thousand hosts.
	within := 2*time.Minute + time.Duration(len(f.nodes)/1000)*time.Minute
	p.res, err = cli.CallWithin(f.op, spec.Push, spec.PushRequest{Progress: progress, Force: force}, within)
	if err != nil {
		tb.Fatalf("%s: %v", spec.Push.Name, err)
	}
	p.replied = time.Since(start)
	want := map[string]uint64{}
	for _, n := range p.res.Nodes {
		if n.Error != "" {
			tb.Fatalf("push to %s: %s", n.Node, n.Error)
		}
		if !n.Unchanged {
			want[n.Node] = n.Seq
		}
	}
	p.sent = len(want)
	timeout := time.After(3*time.Minute + time.Duration(len(f.nodes)/1000)*time.Minute)
	// A push to thousands of hosts says how it goes every half minute.
	var every <-chan time.Time
	if len(f.nodes) >= 2000 {
		tb.Logf("push %s answered after %s: %d nodes sent a declaration", p.res.ID, p.replied.Round(time.Millisecond), p.sent)
		tick := time.NewTicker(30 * time.Second)
		defer tick.Stop()
		every = tick.C
	}
	waiting := map[string]bool{}
	for len(want) > 0 {
		select {
		case <-every:
			tb.Logf("push %s after %s: %d of %d nodes not reported yet, %d of them said they wait", p.res.ID, time.Since(start).Round(time.Second), len(want), p.sent, len(waiting))
		case m := <-events:
			var ev spec.PushEvent
			if json.Unmarshal(m.Data, &ev) != nil || ev.PushID != p.res.ID {
				continue
			}
			// A host that waits for the roster its declaration names has
			// not applied it: its report then comes later.
			if seq, ok := want[ev.Report.Node]; ok && ev.Report.Seq == seq && ev.Report.Waiting != "" {
				waiting[ev.Report.Node] = true
			}
			if seq, ok := want[ev.Report.Node]; ok && ev.Report.Seq == seq && ev.Report.Waiting == "" {
				delete(want, ev.Report.Node)
				delete(waiting, ev.Report.Node)
				p.reports[ev.Report.Node] = ev.Report
			}
		case <-timeout:
			tb.Fatalf("%d of %d nodes did not report within %s", len(want), p.sent, 3*time.Minute+time.Duration(len(f.nodes)/1000)*time.Minute)
		}
	}
	p.last = time.Since(start)
	if every != nil {
		tb.Logf("push %s: the last report %s after it", p.res.ID, p.last.Round(time.Millisecond))
	}
	return p
}

// restart stops the controller (SIGTERM, its bus with it) and starts it
// again with only --dir, as an operator would after an upgrade, and
// returns once it answers, with the time it was started and how long it
// took to answer (/healthz ready).
func (f *fleet) restart(tb testing.TB) (time.Time, time.Duration) {
	tb.Helper()
	f.ctl.stop(tb)
	began := time.Now()
	f.ctl = start(tb, "controller", "--dir", f.dir, "--log-level", "warn", "--pprof", f.pprof)
	f.addrs = waitReady(tb, f.ctl, f.dir)
	ready := time.Since(began)
	f.op.Close()
	op, err := cli.DialOperator(context.Background(), f.dir)
	if err != nil {
		tb.Fatal(err)
	}
	f.op = op
	tb.Cleanup(op.Close)
	return began, ready
}

// heardSince waits until the controller has heard every node after since
// (its last_heard, from the node list) and returns how long after since
// that was; a node not heard within `within` fails tb.
func (f *fleet) heardSince(tb testing.TB, since time.Time, within time.Duration) time.Duration {
	tb.Helper()
	var took time.Duration
	poll.Until(tb, within, "every host heard after the controller's restart", func() error {
		heard, total := 0, 0
		var after string
		for {
			res, err := cli.Call(f.op, spec.NodeList, spec.NodeListRequest{After: after})
			if err != nil {
				tb.Fatalf("node list: %v", err)
			}
			for _, n := range res.Nodes {
				if n.Name == "ctl" {
					continue // the controller's own host, in its process
				}
				total++
				if n.LastHeard != nil && n.LastHeard.After(since) {
					heard++
				}
			}
			if after = res.Next; after == "" {
				break
			}
		}
		took = time.Since(since)
		if heard == total && total == len(f.nodes) {
			return nil
		}
		return fmt.Errorf("%d of %d hosts heard", heard, total)
	})
	return took
}

// controllerPid is the controller's process: genesis's own, or the child
// mesh controller (a launcher) runs.
func (f *fleet) controllerPid(tb testing.TB) int {
	tb.Helper()
	pid := f.ctl.cmd.Process.Pid
	// Each thread lists the children it forked: any of the launcher's may
	// have started the controller.
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, t := range tasks {
		body, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		if kids := strings.Fields(string(body)); len(kids) > 0 {
			child, err := strconv.Atoi(kids[0])
			if err != nil {
				tb.Fatal(err)
			}
			return child
		}
	}
	return pid
}

// profile saves the controller's profile name (heap, or profile?seconds=N
// for its CPU) to dir/file, from its --pprof address.
func (f *fleet) profile(tb testing.TB, name, dir, file string) {
	tb.Helper()
	resp, err := http.Get("http://" + f.pprof + "/debug/pprof/" + name)
	if err != nil {
		tb.Errorf("profile %s: %v", name, err)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Errorf("profile %s: %s %v", name, resp.Status, err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, file), body, 0o644); err != nil {
		tb.Error(err)
	}
}
