package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/cli"
	"github.com/mesh-fleet/mesh/internal/gobuild"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
)

// The rig every end-to-end test shares: the binary, the processes it runs,
// a mesh (genesis) and the hosts that join it, and the CLI calls that read
// and push. Each test makes its own mesh in its own temporary directories,
// on ports it holds (port), so tests run in parallel; those that use the
// Docker engine take node names, subnets and addresses of their own
// (rig_docker_test.go).

// deadUpstream is the only upstream a test's resolver is given: a loopback
// port nothing serves, so no test query ever leaves the machine.
const deadUpstream = "127.0.0.1:9"

// meshBin is the binary under test, built by TestMain with the flags the
// Makefile uses; binDir is a directory of the run's, for the files its
// tests share.
var meshBin, binDir string

// meshEnv is the environment every process of meshBin runs with: this
// process's, and the binary's digest handed over (release.Handoff), as a
// launcher hands it to the process it starts. Each test's daemons have a
// state directory of their own, so each would hash the 45 MB binary again
// at its start: some 130 times a run, 4 s of CPU. A process of any other
// binary, or of a copy of it, hashes it as before: the handoff names the
// file by its identity.
var meshEnv []string

// builds are the other binaries tests build (releases: mesh stamped
// differently, programs for other targets), each once per run, when a
// test first asks for it.
var builds *gobuild.Builder

// parallel is how many tests run at once unless -parallel says: they
// mostly wait on processes and the engine, not on the CPU.
const parallel = 16

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	dir, err := os.MkdirTemp("", "mesh-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	var unlock func()
	if meshBin, unlock, err = buildMesh(); err != nil {
		fmt.Fprintln(os.Stderr, "build mesh:", err)
		os.Exit(1)
	}
	handoff, err := release.Handoff(meshBin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hash mesh:", err)
		os.Exit(1)
	}
	meshEnv = append(os.Environ(), handoff)
	if builds, err = gobuild.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	builds.Close()
	unlock()
	removeSharedImage()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildMesh builds the binary where the runs of this checkout keep it, a
// directory of the temporary one named after the checkout's path: go build
// finds it up to date when nothing it is made of changed, and links
// nothing (a link of the binary is seconds before the first test starts).
// The run holds a lock on the directory until release: exclusive while it
// builds, shared while its tests run, so one run never rebuilds the binary
// under another of the same checkout (whose tests would collide in the
// engine anyway: their node names are the same).
func buildMesh() (bin string, release func(), err error) {
	top, err := filepath.Abs("..")
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256([]byte(top))
	dir := filepath.Join(os.TempDir(), "mesh-e2e-bin-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", nil, err
	}
	err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		fmt.Fprintf(os.Stderr, "waiting for another end-to-end run of %s to end (it holds %s)\n", top, lock.Name())
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX)
	}
	if err != nil {
		lock.Close()
		return "", nil, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	bin = filepath.Join(dir, "mesh")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		lock.Close()
		return "", nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_SH); err != nil {
		lock.Close()
		return "", nil, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	return bin, func() { lock.Close() }, nil
}

// example is the path of the example module name.
func example(name string) string { return filepath.Join("..", "examples", name) }

// daemon is a mesh process (genesis, controller or host) run by a test.
type daemon struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs mesh with args until the test ends; its output is logged if
// the test failed.
func start(t testing.TB, args ...string) *daemon {
	t.Helper()
	return startBin(t, meshBin, args...)
}

// startBin is start with another binary than the one under test.
func startBin(t testing.TB, bin string, args ...string) *daemon {
	t.Helper()
	if flag, addr, ok := kernelPort(args); ok {
		t.Fatalf("mesh %s %s: a daemon of a test listens on a port the test holds (port), not on one the kernel chooses, which may be another process's when the daemon binds it again at a restart", flag, addr)
	}
	return launch(t, bin, args...)
}

// launch is startBin without its refusal of a port the kernel chooses:
// for the test of what mesh does with one.
func launch(t testing.TB, bin string, args ...string) *daemon {
	t.Helper()
	d := &daemon{cmd: exec.Command(bin, args...), out: &syncBuffer{}, done: make(chan error, 1)}
	if bin == meshBin {
		d.cmd.Env = meshEnv
	}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("mesh %s output:\n%s", strings.Join(args, " "), d.out.String())
		}
	})
	return d
}

// listenFlags are the flags of an address a daemon listens on.
var listenFlags = []string{"--bus", "--http", "--dns", "--pprof"}

// kernelPort is the first of args' listening addresses with port 0.
func kernelPort(args []string) (flag, addr string, ok bool) {
	for i, a := range args {
		name, value, inline := strings.Cut(a, "=")
		if !inline && i+1 < len(args) {
			value = args[i+1]
		}
		if slices.Contains(listenFlags, name) && strings.HasSuffix(value, ":0") {
			return name, value, true
		}
	}
	return "", "", false
}

// stop sends SIGTERM and waits for a clean exit.
func (d *daemon) stop(t testing.TB) {
	t.Helper()
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		if err != nil {
			t.Fatalf("mesh did not exit cleanly on SIGTERM: %v\n%s", err, d.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("mesh did not exit within 30s of SIGTERM\n%s", d.out.String())
	}
}

// kill9 kills d with SIGKILL and waits for it to go.
func (d *daemon) kill9(t testing.TB) {
	t.Helper()
	d.cmd.Process.Kill()
	err := <-d.done
	d.done <- err
}

// alive fails the test if d has exited.
func (d *daemon) alive(t testing.TB) {
	t.Helper()
	select {
	case err := <-d.done:
		d.done <- err
		t.Fatalf("mesh exited: %v\n%s", err, d.out.String())
	default:
	}
}

// exited waits for d to exit and returns its exit code.
func (d *daemon) exited(t testing.TB, within time.Duration) int {
	t.Helper()
	select {
	case err := <-d.done:
		d.done <- err
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("mesh still runs after %s:\n%s", within, d.out.String())
		return -1
	}
}

// runMesh runs the CLI and returns its stdout, stderr and exit code. The
// operator's commands (operatorCommands) run through cli.Main in this
// process, as main.go calls it; the others run the binary.
func runMesh(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	if len(args) > 0 && operatorCommands[args[0]] && !raceDetector {
		var stdout, stderr bytes.Buffer
		code := cli.Main(append([]string{"mesh"}, args...), &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}
	return runBinary(t, args...)
}

// operatorCommands are the commands that only read the state directory's
// operator credential and call the controller over the bus. A run makes
// hundreds of them, and a process of the binary costs some 45 ms of CPU
// before it does anything (its start, package init, hashing itself), which
// made them a third of the end-to-end tests' CPU. The commands about the
// machine (genesis, host, controller, install, version) run the binary, as
// does TestControllersAnswerSetsTheExitCode, which holds the exit codes of
// the process. Under the race detector every command runs the binary:
// urfave/cli writes package variables on every run (its help flag's
// default, its help command's separator), which two runs at once in one
// process race on.
var operatorCommands = map[string]bool{
	"assign": true, "audit": true, "ca": true, "module": true, "node": true,
	"push": true, "release": true, "status": true, "token": true, "unassign": true, "cluster": true,
}

// runBinary runs the binary under test with args and returns its stdout,
// stderr and exit code.
func runBinary(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(meshBin, args...)
	cmd.Env = meshEnv
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), code
}

// mustRun runs the CLI, which must exit 0, and returns its stdout.
func mustRun(t testing.TB, args ...string) string {
	t.Helper()
	out, errOut, code := runMesh(t, args...)
	if code != 0 {
		t.Fatalf("mesh %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// testMesh is a genesis process and its state directory.
type testMesh struct {
	dir   string
	node  string // the controller's own node
	d     *daemon
	addrs spec.Addrs
}

// genesis starts a mesh "test" whose own node is alpha, on loopback ports
// the test holds (port), its host with no container engine unless extra
// says --docker; extra flags come last, so they win (--node among them).
func genesis(t testing.TB, dir string, extra ...string) *daemon {
	t.Helper()
	return start(t, append([]string{"genesis", "--dir", dir, "--mesh", "test", "--node", "alpha",
		"--bus", port(t), "--http", port(t), "--dns", port(t), "--dns-upstream", deadUpstream, "--address", "127.0.0.1"},
		noEngine(extra)...)...)
}

// port is a loopback address on a port the test holds until it ends, for
// a daemon to listen on: never port 0, since a daemon keeps the port it
// was given and binds it again when the test restarts it, and a port the
// kernel chose may be another process's by then (testport).
func port(t testing.TB) string {
	t.Helper()
	return testport.Addr(t, "127.0.0.1")
}

// noEngine is extra with --docker none first, unless extra names an
// engine: a test that does not ask for the Docker engine never touches it.
func noEngine(extra []string) []string {
	if slices.Contains(extra, "--docker") {
		return extra
	}
	return append([]string{"--docker", "none"}, extra...)
}

// newMesh is genesis, ready.
func newMesh(t testing.TB, extra ...string) *testMesh {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ctl")
	d := genesis(t, dir, extra...)
	node := "alpha"
	for i, a := range extra {
		if a == "--node" && i+1 < len(extra) {
			node = extra[i+1]
		}
	}
	return &testMesh{dir: dir, node: node, d: d, addrs: waitReady(t, d, dir)}
}

func (m *testMesh) token(t testing.TB, node string, extra ...string) string {
	t.Helper()
	args := append([]string{"token", "create", "--dir", m.dir}, extra...)
	out, errOut, code := runMesh(t, append(args, node)...)
	if code != 0 {
		t.Fatalf("mesh token create %s: exit %d: %s", node, code, errOut)
	}
	return strings.TrimSpace(out)
}

// join joins node to m as a host process of its own, and waits until the
// controller has heard it. It returns the host's state directory.
func (m *testMesh) join(t testing.TB, node string, extra ...string) (string, *daemon) {
	t.Helper()
	dir, d := join(t, m.token(t, node), extra...)
	poll.Until(t, 20*time.Second, node+" heard", func() error {
		return heardAfter(t, m.dir, node, time.Time{})
	})
	return dir, d
}

func (m *testMesh) nodeNames(t testing.TB) string {
	var names []string
	for _, n := range nodeList(t, m.dir) {
		names = append(names, n.Name)
	}
	return strings.Join(names, ",")
}

// metric is a counter or gauge of the controller's /metrics.
func (m *testMesh) metric(t testing.TB, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + m.addrs.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// A value is a float: a count of a million or more is written with
	// an exponent.
	match := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
	if match == nil {
		t.Fatalf("metric %s not in /metrics", name)
	}
	n, err := strconv.ParseFloat(string(match[1]), 64)
	if err != nil {
		t.Fatalf("metric %s: %v", name, err)
	}
	return int(n)
}

// join runs a host that joins with token, as its own process with its own
// --dir, with no container engine unless extra says --docker. It returns once the host runs (its addrs.json is written after
// every part is ready).
func join(t testing.TB, token string, extra ...string) (string, *daemon) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "host")
	d := start(t, append([]string{"host", "--dir", dir, "--join", token, "--address", "127.0.0.2", "--heartbeat", "500ms", "--dns", port(t), "--dns-upstream", deadUpstream}, noEngine(extra)...)...)
	poll.Until(t, 30*time.Second, "the joined host running", func() error {
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("mesh host exited: %v\n%s", err, d.out.String())
		default:
		}
		_, err := os.Stat(filepath.Join(dir, "addrs.json"))
		return err
	})
	return dir, d
}

func readAddrsFile(t testing.TB, dir string) (spec.Addrs, bool) {
	t.Helper()
	var a spec.Addrs
	body, err := os.ReadFile(filepath.Join(dir, "addrs.json"))
	if err != nil {
		return a, false
	}
	return a, json.Unmarshal(body, &a) == nil && a.Bus != "" && a.HTTP != ""
}

// healthy is nil when the controller at addr answers /healthz 200, else
// an error with the status and body it answered.
func healthy(addr string) error {
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	body, _ := io.ReadAll(resp.Body)
	return fmt.Errorf("%d %s", resp.StatusCode, body)
}

// waitReady waits for addrs.json and /healthz, and returns the addresses.
func waitReady(t testing.TB, d *daemon, dir string) spec.Addrs {
	t.Helper()
	var a spec.Addrs
	poll.Until(t, 30*time.Second, "addrs.json written", func() error {
		d.alive(t)
		var ok bool
		a, ok = readAddrsFile(t, dir)
		if ok {
			return nil
		}
		return errors.New("no addrs.json")
	})
	poll.Until(t, 30*time.Second, "/healthz ready", func() error {
		return healthy(a.HTTP)
	})
	return a
}

// dnsAddr is where the resolver of the machine kept in dir listens.
func dnsAddr(t testing.TB, dir string) string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(dir, "addrs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var a spec.Addrs
	json.Unmarshal(body, &a)
	if a.DNS == "" {
		t.Fatalf("%s/addrs.json names no resolver: %s", dir, body)
	}
	return a.DNS
}

// configOf reads D/config.yaml.
func configOf(t testing.TB, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The reads tests poll (node list, node show, status) go through the
// operator's client in this process, over one connection per mesh, rather
// than a mesh process each: a run makes hundreds of them, and a process
// costs some 50 ms of CPU. They are the API calls the commands make, and
// are audited as theirs are; the commands a test is about go through
// runMesh, the whole command line.
var operators = struct {
	sync.Mutex
	m map[string]*cli.Operator // by state directory
}{m: map[string]*cli.Operator{}}

// call makes one operator API call to the mesh kept in dir; a connection
// lost to a controller's restart is dialled again, once.
func call[Req, Res any](t testing.TB, dir string, v spec.Verb[Req, Res], req Req) Res {
	t.Helper()
	res, err := tryCall(t, dir, v, req)
	if err != nil {
		t.Fatalf("%s to the mesh in %s: %v", v.Name, dir, err)
	}
	return res
}

// tryCall is call returning its failure: for a wait on a mesh whose bus
// may be starting again (a controller in a growing cluster).
func tryCall[Req, Res any](t testing.TB, dir string, v spec.Verb[Req, Res], req Req) (Res, error) {
	for try := 0; ; try++ {
		op, err := operator(t, dir)
		var res Res
		if err == nil {
			res, err = cli.Call(op, v, req)
		}
		var answered *spec.ReplyError
		if err == nil || errors.As(err, &answered) || try == 1 {
			return res, err
		}
		operators.Lock()
		if operators.m[dir] == op {
			delete(operators.m, dir)
			if op != nil {
				op.Close()
			}
		}
		operators.Unlock()
	}
}

// operator is the rig's connection to the mesh kept in dir, dialled the
// first time and closed when the test ends.
func operator(t testing.TB, dir string) (*cli.Operator, error) {
	operators.Lock()
	defer operators.Unlock()
	if op := operators.m[dir]; op != nil {
		return op, nil
	}
	op, err := cli.DialOperator(context.Background(), dir)
	if err != nil {
		return nil, err
	}
	operators.m[dir] = op
	t.Cleanup(func() {
		operators.Lock()
		defer operators.Unlock()
		if operators.m[dir] == op {
			delete(operators.m, dir)
		}
		op.Close()
	})
	return op, nil
}

// nodeList is what mesh node list --json says: every node, page by page.
func nodeList(t testing.TB, dir string) []spec.Node {
	t.Helper()
	nodes, err := tryNodeList(t, dir)
	if err != nil {
		t.Fatalf("%s to the mesh in %s: %v", spec.NodeList.Name, dir, err)
	}
	return nodes
}

// tryNodeList is nodeList returning its failure.
func tryNodeList(t testing.TB, dir string) ([]spec.Node, error) {
	nodes := []spec.Node{}
	req := spec.NodeListRequest{}
	for {
		res, err := tryCall(t, dir, spec.NodeList, req)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, res.Nodes...)
		if res.Next == "" || res.Next <= req.After {
			return nodes, nil
		}
		req.After = res.Next
	}
}

// nodeShow is what mesh node show --json NODE says.
func nodeShow(t testing.TB, dir, node string) spec.Node {
	t.Helper()
	res := call(t, dir, spec.NodeShow, spec.NodeShowRequest{Name: node})
	return res.Node
}

// heardAfter is nil once node was last heard after after, else an error
// saying when it was.
func heardAfter(t testing.TB, dir, node string, after time.Time) error {
	nodes, err := tryNodeList(t, dir)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Name == node {
			if n.LastHeard != nil && n.LastHeard.After(after) {
				return nil
			}
			return fmt.Errorf("%s last heard %v", node, n.LastHeard)
		}
	}
	return errors.New(node + " not listed")
}

// lastResult is the result named name in node's last report, and the
// report; ok is false while there is none.
func lastResult(t testing.TB, dir, node, name string) (spec.ResourceResult, *spec.Report, bool) {
	t.Helper()
	r := nodeShow(t, dir, node).LastReport
	if r == nil {
		return spec.ResourceResult{}, nil, false
	}
	for _, res := range r.Results {
		if res.Name == name {
			return res, r, true
		}
	}
	return spec.ResourceResult{}, r, false
}

// statusOf is what mesh status --json says, and whether it would exit 0
// (the all-clear).
func statusOf(t testing.TB, dir string) (spec.StatusResult, bool) {
	t.Helper()
	res := call(t, dir, spec.Status, spec.StatusRequest{})
	return res, res.AllClear
}

// statusJSON is statusOf with mesh status's exit code.
func statusJSON(t testing.TB, dir string) (spec.StatusResult, int) {
	t.Helper()
	res, clear := statusOf(t, dir)
	if clear {
		return res, 0
	}
	return res, 1
}

// pushJSON runs mesh push --json and decodes what it printed.
func pushJSON(t testing.TB, dir string, args ...string) (cli.PushOutcome, int) {
	t.Helper()
	// The wait is generous: a test never times a push, and a loaded engine
	// (many meshes making networks at once) can take a minute to answer.
	out, errOut, code := runMesh(t, append([]string{"push", "--dir", dir, "--json", "--wait", "3m"}, args...)...)
	var o cli.PushOutcome
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		t.Fatalf("mesh push --json: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	return o, code
}

// push is a push (with args) that must succeed everywhere.
func push(t testing.TB, dir string, args ...string) cli.PushOutcome {
	t.Helper()
	o, code := pushJSON(t, dir, args...)
	if code != 0 || !o.OK {
		var why []string
		for _, n := range o.Nodes {
			if n.Report != nil {
				for _, r := range n.Report.Results {
					if r.Error != "" {
						why = append(why, n.Node+": "+r.Name+": "+r.Error)
					}
				}
			}
		}
		t.Fatalf("push: exit %d: %+v\n%s", code, o, strings.Join(why, "\n"))
	}
	return o
}

// outcomes is each node's outcome of each resource in a push.
func outcomes(o cli.PushOutcome) map[string]map[string]string {
	m := map[string]map[string]string{}
	for _, n := range o.Nodes {
		m[n.Node] = map[string]string{}
		if n.Report != nil {
			for _, r := range n.Report.Results {
				m[n.Node][r.Name] = r.Outcome
			}
		}
	}
	return m
}

// reportOf is node's report in a push, which must have one.
func reportOf(t testing.TB, o cli.PushOutcome, node string) *spec.Report {
	t.Helper()
	for _, n := range o.Nodes {
		if n.Node == node {
			if n.Report == nil {
				t.Fatalf("no report from %s: %+v", node, n)
			}
			return n.Report
		}
	}
	t.Fatalf("%s is not in the push: %+v", node, o)
	return nil
}

// fileModule writes a module declaring one file, and returns its directory.
func fileModule(t testing.TB, name, path, content string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest, _ := json.Marshal(map[string]any{"name": name, "version": "1", "resources": []any{
		map[string]any{"file": map[string]any{"path": path, "content": content, "mode": "0644"}},
	}})
	if err := os.WriteFile(filepath.Join(dir, "module.json"), manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// unchangedNotSent says whether push o sent node nothing because its last
// declaration already held what would have been sent.
func unchangedNotSent(o cli.PushOutcome, node string) bool {
	for _, n := range o.Nodes {
		if n.Node == node {
			return n.Unchanged && n.Error == "" && n.Report == nil
		}
	}
	return false
}
