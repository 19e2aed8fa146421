package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/miekg/dns"
)

// TestDriftAtStartBeforeAnyPush: a controller restarted over drift hears
// its own host's correcting report before any push since it started, and
// must live: a report handler that expects a push's watchers to exist
// would panic the process and the bus.
func TestDriftAtStartBeforeAnyPush(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	m := newMesh(t, "--root", root)
	mustRun(t, "module", "register", "--dir", m.dir, example("motd"))
	mustRun(t, "assign", "--dir", m.dir, "motd", "alpha")
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("push: exit %d %+v", code, o)
	}
	motd := filepath.Join(root, "etc/motd")
	want, err := os.ReadFile(motd)
	if err != nil {
		t.Fatal(err)
	}
	m.d.stop(t)

	if err := os.WriteFile(motd, []byte("drifted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := start(t, "controller", "--dir", m.dir, "--root", root, "--dns", port(t), "--dns-upstream", deadUpstream)
	waitReady(t, d, m.dir)
	poll.Until(t, 20*time.Second, "the drift corrected and reported", func() error {
		d.alive(t)
		got, _ := os.ReadFile(motd)
		n := nodeShow(t, m.dir, "alpha")
		if string(got) != string(want) || n.LastReport == nil {
			return errors.New("motd " + strings.TrimSpace(string(got)))
		}
		for _, r := range n.LastReport.Results {
			if r.Name == "motd:file:/etc/motd" && r.Outcome == spec.Changed {
				return nil
			}
		}
		return errors.New("last report has no correction of /etc/motd")
	})
	d.alive(t)
	if n := m.metric(t, "mesh_panics_total"); n != 0 {
		t.Fatalf("mesh_panics_total is %d after the restart:\n%s", n, d.out.String())
	}
	if _, clear := statusOf(t, m.dir); !clear {
		res, _ := statusOf(t, m.dir)
		t.Fatalf("status after the correction is not all-clear: %+v", res)
	}
}

// TestRestartKeepsHowItWasStarted: what genesis and a join were given is
// kept in D/config.yaml, and a start with no flags runs as they did: the
// files land under the same --root (never the machine's /), drift is
// corrected at the same --reconcile pace. A flag given at a start
// overrides the file and is kept, with a log line; a bad value or key in
// the file is refused with its name and changes nothing; a second process
// on one state directory is refused.
func TestRestartKeepsHowItWasStarted(t *testing.T) {
	t.Parallel()
	rootA, rootB := t.TempDir(), t.TempDir()
	m := newMesh(t, "--root", rootA, "--reconcile", "500ms", "--dns-allow", "10.9.0.0/16", "--docker", "none")
	betaDir, beta := join(t, m.token(t, "beta"), "--root", rootB, "--reconcile", "500ms", "--docker", "none")
	for _, c := range []struct{ dir, want string }{
		{m.dir, "root: " + rootA},
		{m.dir, "reconcile: 500ms"},
		{m.dir, "- 10.9.0.0/16"},
		{m.dir, "docker: none"},
		{m.dir, "- " + deadUpstream},
		{betaDir, "root: " + rootB},
		{betaDir, "heartbeat: 500ms"},
		{betaDir, "- " + deadUpstream},
	} {
		if got := configOf(t, c.dir); !strings.Contains(got, c.want+"\n") {
			t.Errorf("%s/config.yaml lacks %q:\n%s", c.dir, c.want, got)
		}
	}
	// The state directory is locked while a process runs on it.
	_, errOut, code := runMesh(t, "controller", "--dir", m.dir)
	if code == 0 || !strings.Contains(errOut, "another mesh process runs on "+m.dir) {
		t.Fatalf("a second controller on a running mesh: exit %d: %s", code, errOut)
	}
	_, errOut, code = runMesh(t, "host", "--dir", betaDir)
	if code == 0 || !strings.Contains(errOut, "another mesh process runs on "+betaDir) {
		t.Fatalf("a second host on a running host: exit %d: %s", code, errOut)
	}

	// Both stopped, both started again with nothing but --dir.
	keptA, keptB := configOf(t, m.dir), configOf(t, betaDir)
	betaDNS := dnsAddr(t, betaDir)
	m.d.stop(t)
	beta.stop(t)
	d := start(t, "controller", "--dir", m.dir)
	waitReady(t, d, m.dir)
	os.Remove(filepath.Join(betaDir, "addrs.json")) // written again once the host runs
	beta = start(t, "host", "--dir", betaDir)
	poll.Until(t, 20*time.Second, "beta running again", func() error {
		beta.alive(t)
		_, err := os.Stat(filepath.Join(betaDir, "addrs.json"))
		return err
	})
	// Checked before anything is pushed: a host that forgot its flags
	// would apply under the machine's own /.
	if got := dnsAddr(t, betaDir); got != betaDNS {
		t.Fatalf("beta's resolver moved from %s to %s: the restart did not keep its flags", betaDNS, got)
	}
	if configOf(t, m.dir) != keptA || configOf(t, betaDir) != keptB {
		t.Errorf("a start without flags rewrote config.yaml:\n%s\nwas\n%s", configOf(t, m.dir), keptA)
	}
	mustRun(t, "module", "register", "--dir", m.dir, example("motd"))
	mustRun(t, "assign", "--dir", m.dir, "motd", "alpha")
	mustRun(t, "assign", "--dir", m.dir, "motd", "beta")
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("push after the restart: exit %d %+v", code, o)
	}
	for _, root := range []string{rootA, rootB} {
		if _, err := os.Stat(filepath.Join(root, "etc/motd")); err != nil {
			t.Fatalf("the file did not land under the kept --root: %v", err)
		}
		// Drift is corrected at the kept pace (the default is 5 minutes).
		os.WriteFile(filepath.Join(root, "etc/motd"), []byte("drift\n"), 0o644)
	}
	poll.Until(t, 10*time.Second, "drift corrected at the kept --reconcile", func() error {
		for _, root := range []string{rootA, rootB} {
			if b, _ := os.ReadFile(filepath.Join(root, "etc/motd")); string(b) == "drift\n" {
				return errors.New(root + " still drifted")
			}
		}
		return nil
	})

	// A flag given at a start overrides the file, is kept, and is logged.
	d.stop(t)
	d = start(t, "controller", "--dir", m.dir, "--reconcile", "2s")
	waitReady(t, d, m.dir)
	if got := configOf(t, m.dir); !strings.Contains(got, "reconcile: 2s\n") || !strings.Contains(got, "root: "+rootA+"\n") {
		t.Errorf("config.yaml after --reconcile 2s:\n%s", got)
	}
	if !strings.Contains(d.out.String(), `flag=--reconcile was=500ms now=2s`) {
		t.Errorf("the change was not logged:\n%s", d.out.String())
	}
	d.stop(t)

	// A bad value or an unknown key is refused by name; nothing changes.
	for _, bad := range []struct{ edit, want string }{
		{strings.Replace(configOf(t, m.dir), "subnet: 10.213.0.0/24", "subnet: bogus", 1), `--subnet "bogus"`},
		{configOf(t, m.dir) + "colour: blue\n", `"colour" is not a flag mesh keeps`},
	} {
		before := configOf(t, m.dir)
		os.WriteFile(filepath.Join(m.dir, "config.yaml"), []byte(bad.edit), 0o600)
		_, errOut, code := runMesh(t, "controller", "--dir", m.dir)
		if code != 2 || !strings.Contains(errOut, bad.want) || !strings.Contains(errOut, "config.yaml") {
			t.Errorf("a config.yaml with %s: exit %d: %s", bad.want, code, errOut)
		}
		if configOf(t, m.dir) != bad.edit {
			t.Errorf("a refused start rewrote config.yaml")
		}
		os.WriteFile(filepath.Join(m.dir, "config.yaml"), []byte(before), 0o600)
	}
}

// TestWildcardResolverOnAController: --dns 0.0.0.0 on genesis binds both
// families (binding [::] alone would refuse every IPv4 query, 127.0.0.1
// included), addrs.json and config.yaml keep the wildcard
// asked for, and a restart binds it the same.
func TestWildcardResolverOnAController(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--root", t.TempDir(), "--dns", testport.Addr(t, "0.0.0.0"))
	check := func() {
		t.Helper()
		addr := dnsAddr(t, m.dir)
		host, port, _ := net.SplitHostPort(addr)
		if host != "0.0.0.0" {
			t.Fatalf("addrs.json keeps the resolver at %s, want the wildcard asked for", addr)
		}
		if got := configOf(t, m.dir); !strings.Contains(got, "dns: 0.0.0.0:"+port+"\n") {
			t.Fatalf("config.yaml does not keep the resolver's wildcard and port:\n%s", got)
		}
		for _, to := range []string{"127.0.0.1", "::1"} {
			r, err := ask(t, net.JoinHostPort(to, port), "alpha.internal", dns.TypeA)
			if err != nil || r.Rcode == dns.RcodeRefused {
				t.Fatalf("the resolver on %s, asked on %s: %v %v", addr, to, r, err)
			}
		}
	}
	check()
	m.d.stop(t)
	d := start(t, "controller", "--dir", m.dir)
	waitReady(t, d, m.dir)
	check()
}

// TestBusRebindAndAdvertise: a mesh whose bus listens on loopback warns
// that its tokens reach no other machine; mesh controller --bus rebinds
// (kept in addrs.json, the machine's own host follows) and --advertise sets
// what tokens carry (kept in config.yaml).
func TestBusRebindAndAdvertise(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--root", t.TempDir())
	_, errOut, code := runMesh(t, "token", "create", "--dir", m.dir, "beta")
	if code != 0 || !strings.Contains(errOut, "warning: the token carries only loopback addresses") || !strings.Contains(errOut, "--advertise") {
		t.Fatalf("token create on a loopback bus: exit %d, no warning: %s", code, errOut)
	}
	m.d.stop(t)

	d := start(t, "controller", "--dir", m.dir, "--bus", port(t), "--advertise", "192.0.2.10", "--advertise", "mesh.example.org:7422")
	poll.Until(t, 20*time.Second, "addrs.json names the new bus", func() error {
		d.alive(t)
		a, _ := readAddrsFile(t, m.dir)
		if a.Bus != m.addrs.Bus {
			return nil
		}
		return errors.New("still " + a.Bus)
	})
	addrs := waitReady(t, d, m.dir)
	poll.Until(t, 20*time.Second, "the controller's own host heard on the new bus", func() error {
		return heardAfter(t, m.dir, "alpha", time.Now().Add(-time.Second))
	})
	_, port, _ := net.SplitHostPort(addrs.Bus)
	out, errOut, code := runMesh(t, "token", "create", "--dir", m.dir, "gamma")
	if code != 0 || strings.Contains(errOut, "warning") {
		t.Fatalf("token create with --advertise: exit %d: %s", code, errOut)
	}
	tok, err := spec.ParseToken(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"nats://192.0.2.10:" + port, "nats://mesh.example.org:7422"}; strings.Join(tok.Bus, " ") != strings.Join(want, " ") {
		t.Fatalf("the token carries %v, want %v", tok.Bus, want)
	}
	if got := configOf(t, m.dir); !strings.Contains(got, "advertise:\n    - 192.0.2.10\n    - mesh.example.org:7422\n") {
		t.Fatalf("config.yaml does not keep --advertise:\n%s", got)
	}
	// A wildcard cannot be advertised.
	d.stop(t)
	_, errOut, code = runMesh(t, "controller", "--dir", m.dir, "--advertise", "0.0.0.0")
	if code != 2 || !strings.Contains(errOut, "a wildcard cannot be reached") {
		t.Fatalf("--advertise 0.0.0.0: exit %d: %s", code, errOut)
	}
}

// TestSubnetMoveUnderContainersIsRefused: a restart with a --subnet that
// would move the node's network while a container is attached is refused
// with the container's name before anything changes (else the host would
// replace the containers and point them at a gateway where nothing
// listens); a restart with no flags keeps the subnet and replaces nothing.
func TestSubnetMoveUnderContainersIsRefused(t *testing.T) {
	t.Parallel()
	m := newContainerMesh(t)
	mustRun(t, "module", "register", "--dir", m.dir, m.webDir)
	mustRun(t, "assign", "--dir", m.dir, "web", m.b)
	if got := outcomes(push(t, m.dir)); got[m.b]["web:container:web"] != spec.Created {
		t.Fatalf("push: %v", got)
	}
	webID := m.id(t, m.b, "web")
	kept := configOf(t, m.betaDir)
	m.beta.stop(t)
	since := time.Now()

	// 10.214/16 is no other test's.
	refused := start(t, "host", "--dir", m.betaDir, "--subnet", "10.214.250.0/24")
	code, errOut := refused.exited(t, 30*time.Second), refused.out.String()
	if code == 0 || !strings.Contains(errOut, "has containers attached ("+m.b+"-web)") || !strings.Contains(errOut, "nothing was changed") {
		t.Fatalf("a --subnet move under a container: exit %d: %s", code, errOut)
	}
	if configOf(t, m.betaDir) != kept {
		t.Fatalf("a refused --subnet rewrote config.yaml:\n%s", configOf(t, m.betaDir))
	}

	start(t, "host", "--dir", m.betaDir)
	// Heard again with its engine: the stopped host's last heartbeat may be
	// recorded after since (heartbeats are written in batches), and a host
	// that stops sends it without the engine, which it no longer asks.
	poll.Until(t, 30*time.Second, "beta heard again with its engine", func() error {
		if err := heardAfter(t, m.dir, m.b, since); err != nil {
			return err
		}
		for _, n := range nodeList(t, m.dir) {
			if n.Name == m.b && n.Facts != nil && slices.Contains(n.Facts.Capabilities, spec.CapContainers) {
				return nil
			}
		}
		return errors.New(m.b + " reports no container engine")
	})
	o := push(t, m.dir, "--force")
	if got := outcomes(o); got[m.b]["web:container:web"] != spec.Unchanged || got[m.b]["mesh:network:mesh-"+m.b] != spec.Unchanged {
		t.Fatalf("a push after the restart with the kept subnet: %v", got)
	}
	if m.id(t, m.b, "web") != webID {
		t.Fatal("the restarts replaced beta's container")
	}
	if ev := m.lifecycle(t, since); len(ev) != 0 {
		t.Fatalf("the restarts: the engine saw %v, want nothing", ev)
	}
}

// TestRestartsOfEveryKind drives a restart of every kind (the controller,
// the host, both; each stopped and each killed with -9) with a declaration
// in flight and drift present, and starts each again with nothing but
// --dir. After every one the processes live, the hosts converge without
// help (nothing is left sent and never applied), status ends all-clear, no
// container was replaced, and sequence numbers only rose.
func TestRestartsOfEveryKind(t *testing.T) {
	optin.NeedSlow(t, "six rounds of stops and kills with containers, minutes")
	t.Parallel()
	// Two meshes at once: the stops on one, the kills on the other.
	for _, c := range []struct {
		name   string
		rounds []restart
	}{
		{"stopped", []restart{{"controller stopped", "stop", ""}, {"host stopped", "", "stop"}, {"both stopped", "stop", "stop"}}},
		{"killed", []restart{{"controller killed", "kill", ""}, {"host killed", "", "kill"}, {"both killed", "kill", "kill"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			restartRounds(t, c.rounds)
		})
	}
}

// restart is how the controller and the host end in one round: "", "stop"
// (SIGTERM) or "kill" (SIGKILL).
type restart struct {
	name      string
	ctl, host string
}

// restartRounds drives rounds on a mesh of its own.
func restartRounds(t *testing.T, rounds []restart) {
	m := newContainerMesh(t)
	mustRun(t, "module", "register", "--dir", m.dir, m.webDir, example("motd"), example("hello"))
	for _, node := range []string{m.a, m.b} {
		mustRun(t, "assign", "--dir", m.dir, "web", node)
		mustRun(t, "assign", "--dir", m.dir, "motd", node)
		mustRun(t, "assign", "--dir", m.dir, "--set", "token=r0", "hello", node)
	}
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("first push: exit %d %+v", code, o)
	}
	ids := map[string]string{m.a: m.id(t, m.a, "web"), m.b: m.id(t, m.b, "web")}
	roots := map[string]string{m.a: m.rootA, m.b: m.rootB}
	seqs := func() map[string][2]uint64 {
		res, _ := statusOf(t, m.dir)
		s := map[string][2]uint64{}
		for _, n := range res.Nodes {
			s[n.Node] = [2]uint64{n.SentSeq, n.AppliedSeq}
		}
		return s
	}
	last := seqs()

	ctl, host := m.d, m.beta
	for round, kind := range rounds {
		since := time.Now()
		token := fmt.Sprintf("r%d", round+1)
		for node, root := range roots {
			os.WriteFile(filepath.Join(root, "etc/motd"), []byte("drift\n"), 0o644)
			mustRun(t, "assign", "--dir", m.dir, "--set", "token="+token, "hello", node)
		}
		// A push in flight: not waited for.
		inFlight := exec.Command(meshBin, "push", "--dir", m.dir, "--wait", "10s")
		if err := inFlight.Start(); err != nil {
			t.Fatal(err)
		}
		for _, p := range []struct {
			how string
			d   *daemon
		}{{kind.host, host}, {kind.ctl, ctl}} {
			switch p.how {
			case "stop":
				p.d.stop(t)
			case "kill":
				p.d.kill9(t)
			}
		}
		inFlight.Wait()
		if kind.ctl != "" {
			ctl = start(t, "controller", "--dir", m.dir)
			waitReady(t, ctl, m.dir)
		}
		if kind.host != "" {
			host = start(t, "host", "--dir", m.betaDir)
		}

		// The hosts converge on what was sent without a push: nothing is
		// left sent and never applied, nothing failed.
		poll.Until(t, 60*time.Second, kind.name+": every node applied what was sent", func() error {
			ctl.alive(t)
			host.alive(t)
			res, _ := statusOf(t, m.dir)
			for _, n := range res.Nodes {
				if n.Silent || n.SentSeq != n.AppliedSeq || len(n.Failures) > 0 || n.Refused != "" {
					return fmt.Errorf("%+v", n)
				}
			}
			return nil
		})
		// A push the restart cut short before it sent is the operator's to
		// push again.
		if res, _ := statusOf(t, m.dir); !res.AllClear {
			if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
				t.Fatalf("%s: push after the restart: exit %d %+v", kind.name, code, o)
			}
		}
		poll.Until(t, 30*time.Second, kind.name+": all-clear", func() error {
			res, clear := statusOf(t, m.dir)
			if clear {
				return nil
			}
			return fmt.Errorf("problems %q", res.Problems)
		})
		for node, root := range roots {
			if b, _ := os.ReadFile(filepath.Join(root, "etc/motd")); string(b) == "drift\n" {
				t.Errorf("%s: %s's drift was not corrected", kind.name, node)
			}
			if b, _ := os.ReadFile(filepath.Join(root, "srv/hello/token")); string(b) != token {
				t.Errorf("%s: %s holds token %q, want %q", kind.name, node, b, token)
			}
			if got := m.id(t, node, "web"); got != ids[node] {
				t.Errorf("%s: %s's container was replaced", kind.name, node)
			}
		}
		if ev := m.lifecycle(t, since); len(ev) != 0 {
			t.Errorf("%s: the engine saw %v, want nothing", kind.name, ev)
		}
		now := seqs()
		for node, s := range now {
			if s[0] < last[node][0] || s[1] < last[node][1] {
				t.Errorf("%s: %s's sent/applied went from %v to %v", kind.name, node, last[node], s)
			}
		}
		last = now
		ctl.alive(t)
		host.alive(t)
	}
}
