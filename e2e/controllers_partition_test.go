package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/cli"
	meshdaemon "github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// The partition rig: three controllers and two hosts, each a machine of
// its own (a network namespace) on one bridge, the rig's internet
// (198.18.0.0/24, as the sites rig's):
//
//	public namespace: bridge br0
//	  controller namespaces c1, c2, c3: pub 198.18.0.2, .3, .4
//	  host namespaces h1, h2:           pub 198.18.0.21, .22
//
// A partition is a firewall in one controller's namespace dropping what
// goes to and comes from the other two: its own CLI, and the hosts, reach
// it still.

// partCtlIPs are the controllers' addresses; partRoute is the port their
// routes listen on.
var partCtlIPs = []string{"198.18.0.2", "198.18.0.3", "198.18.0.4"}

const partRoute = "6222"

// partRig is one test's machines: the controllers (c1 made the mesh, c2
// and c3 joined it) and the hosts.
type partRig struct {
	t     testing.TB
	s     *sites
	nss   []string  // each controller's namespace
	dirs  []string  // each controller's state directory
	nodes []string  // each controller's own node
	ds    []*daemon // each controller's process
	hosts []partHost
}

// partHost is a host of the rig: its node, namespace, where its declared
// paths resolve, and the sequences it applied as the test saw them.
type partHost struct {
	node, ns, dir, root string
	seqs                *seqWatch
	d                   *daemon
}

// newPartSites is the rig's public bridge alone, the namespaces removed
// when the test ends (each namespace's addresses logged if it failed).
func newPartSites(t testing.TB) *sites {
	t.Helper()
	needRoot(t, "the partition rig")
	suffix := make([]byte, 3)
	rand.Read(suffix)
	s := &sites{t: t, prefix: "mesh-" + hex.EncodeToString(suffix) + "-"}
	s.public = s.prefix + "pub"
	t.Cleanup(func() {
		if t.Failed() {
			s.dump(s.made)
		}
		for _, ns := range s.made {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("ip netns del %s: %v: %s", ns, err, out)
			}
		}
	})
	s.add(s.public)
	s.ip("-n", s.public, "link", "add", "br0", "type", "bridge")
	s.ip("-n", s.public, "link", "set", "br0", "up")
	return s
}

// newPartRig makes the three controllers, waits until one leads, and
// registers the module note through it.
func newPartRig(t testing.TB) *partRig {
	t.Helper()
	r := &partRig{t: t, s: newPartSites(t)}
	for i, ip := range partCtlIPs {
		ns := fmt.Sprintf("%sc%d", r.s.prefix, i+1)
		r.s.add(ns)
		r.s.plug(ns, ip)
		r.nss = append(r.nss, ns)
		r.nodes = append(r.nodes, fmt.Sprintf("ctl%d", i+1))
		r.dirs = append(r.dirs, filepath.Join(t.TempDir(), r.nodes[i]))
	}
	own := func(i int) []string {
		ip := partCtlIPs[i]
		return []string{"--dir", r.dirs[i], "--bus", ip + ":" + rigBus, "--http", ip + ":" + rigHTTP,
			"--cluster", ip + ":" + partRoute, "--address", ip, "--advertise", ip,
			"--dns", rigDNS, "--dns-upstream", deadUpstream, "--heartbeat", "500ms", "--docker", "none"}
	}
	r.ds = append(r.ds, meshIn(t, r.nss[0], append([]string{"genesis", "--mesh", "test", "--node", r.nodes[0]}, own(0)...)...))
	r.waitAddrs(0)
	for i := 1; i < len(partCtlIPs); i++ {
		token := strings.TrimSpace(r.cliOK(0, "token", "create", "--dir", r.dirs[0], "--controller", r.nodes[i]))
		r.ds = append(r.ds, meshIn(t, r.nss[i], append([]string{"controller", "--join", token}, own(i)...)...))
		r.waitAddrs(i)
	}
	lead := r.leader([]int{0, 1, 2}, 90*time.Second)
	mod := filepath.Join(t.TempDir(), "note")
	os.MkdirAll(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "module.json"), []byte(noteModule), 0o644)
	r.cliOK(lead, "module", "register", "--dir", r.dirs[lead], mod)
	return r
}

// waitAddrs waits until controller i wrote where it listens.
func (r *partRig) waitAddrs(i int) {
	r.t.Helper()
	poll.Until(r.t, 60*time.Second, r.dirs[i]+"/addrs.json written", func() error {
		r.ds[i].alive(r.t)
		var a spec.Addrs
		body, err := os.ReadFile(filepath.Join(r.dirs[i], "addrs.json"))
		if err != nil || json.Unmarshal(body, &a) != nil || a.Bus == "" {
			return fmt.Errorf("%s %v", body, err)
		}
		return nil
	})
}

// cli runs the CLI in controller i's namespace.
func (r *partRig) cli(i int, args ...string) (string, string, int) {
	r.t.Helper()
	r.ds[i].alive(r.t)
	return cliIn(r.t, r.nss[i], args...)
}

// cliOK is cli, retried while it fails within 30 s (a bus being formed
// refuses a moment); it returns stdout.
func (r *partRig) cliOK(i int, args ...string) string {
	r.t.Helper()
	var out string
	poll.Until(r.t, 30*time.Second, "mesh "+strings.Join(args, " ")+" in "+r.nodes[i], func() error {
		o, errOut, code := r.cli(i, args...)
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		out = o
		return nil
	})
	return out
}

// server is the cluster server name of controller i.
func (r *partRig) server(i int) string {
	r.t.Helper()
	st, err := meshdaemon.ReadClusterState(r.dirs[i])
	if err != nil || st == nil {
		r.t.Fatalf("the cluster's state of %s: %v", r.dirs[i], err)
	}
	return st.Server
}

// roles asks the controllers reachable through controller i's bus what
// they are, from its namespace, and returns the answers by server name:
// once want have answered, or what came within 3 s.
func (r *partRig) roles(i, want int) (map[string]spec.ControllerRole, error) {
	var op *cli.Operator
	// The connection is dialled on a thread in the namespace, and keeps
	// it.
	if err := inNS(r.nss[i], func() (err error) {
		op, err = cli.DialOperator(r.t.Context(), r.dirs[i])
		return err
	}); err != nil {
		return nil, err
	}
	defer op.Close()
	return askRoles(op, want)
}

// leader waits until one of the controllers of view leads, as every one
// of them says when asked through the first's bus, and returns its index.
func (r *partRig) leader(view []int, within time.Duration) int {
	r.t.Helper()
	found := -1
	poll.Until(r.t, within, "one controller of "+fmt.Sprint(view)+" leads", func() error {
		rs, err := r.roles(view[0], len(view))
		if err != nil {
			return err
		}
		found = -1
		var why []string
		for _, i := range view {
			role := rs[r.server(i)]
			why = append(why, fmt.Sprintf("%s: %+v", r.nodes[i], role))
			if role.Role == "leader" {
				if found >= 0 {
					r.t.Fatalf("two controllers lead at once: %s", strings.Join(why, "; "))
				}
				found = i
			}
		}
		if found < 0 {
			return errors.New(strings.Join(why, "; "))
		}
		for _, i := range view {
			if role := rs[r.server(i)]; role.Leader != r.server(found) {
				return fmt.Errorf("%s leads, %s says %+v", r.nodes[found], r.nodes[i], role)
			}
		}
		return nil
	})
	return found
}

// join runs host node at ip in a namespace of its own, its traffic to
// the controllers at refused refused at once (so it is on the bus of
// another), enrolled with a token controller i made, and waits until
// controller i hears it.
func (r *partRig) join(i int, node, ip string, refused []string) {
	r.t.Helper()
	ns := r.s.prefix + node
	r.s.add(ns)
	r.s.plug(ns, ip)
	for _, to := range refused {
		r.s.in(ns, "iptables", "-A", "OUTPUT", "-d", to, "-j", "REJECT")
	}
	token := strings.TrimSpace(r.cliOK(i, "token", "create", "--dir", r.dirs[i], node))
	dir, root := filepath.Join(r.t.TempDir(), node), r.t.TempDir()
	// A follower's bus admits the token's user a moment after the
	// leader made it (it brings its users up to its view each second),
	// and a join refused there exits: it is run again.
	var d *daemon
	poll.Until(r.t, 30*time.Second, node+" joined and running", func() error {
		if d == nil {
			d = meshIn(r.t, ns, "host", "--dir", dir, "--join", token, "--address", ip, "--root", root,
				"--heartbeat", "500ms", "--dns", rigDNS, "--dns-upstream", deadUpstream, "--docker", "none")
		}
		select {
		case err := <-d.done:
			d.done <- err
			out := d.out.String()
			d = nil
			return fmt.Errorf("the join exited: %v: %s", err, out)
		default:
		}
		_, err := os.Stat(filepath.Join(dir, "addrs.json"))
		return err
	})
	poll.Until(r.t, 30*time.Second, node+" heard", func() error {
		n := r.show(i, node)
		if n.LastHeard != nil {
			return nil
		}
		return fmt.Errorf("%s last heard %v", node, n.LastHeard)
	})
	r.hosts = append(r.hosts, partHost{node: node, ns: ns, dir: dir, root: root, d: d, seqs: watchSeqs(r.t, dir)})
}

// show is what mesh node show --json says of node through controller i.
func (r *partRig) show(i int, node string) spec.Node {
	r.t.Helper()
	var n spec.Node
	out := r.cliOK(i, "node", "show", "--dir", r.dirs[i], "--json", node)
	if err := json.Unmarshal([]byte(out), &n); err != nil {
		r.t.Fatalf("mesh node show --json %s: %v: %s", node, err, out)
	}
	return n
}

// push sets note's text on hosts (every one when text is empty: none
// changed) and pushes them through controller i, retried while it fails
// within; it returns each host's sequence of the push.
func (r *partRig) push(i int, text string, hosts []partHost, within time.Duration) map[string]uint64 {
	r.t.Helper()
	var nodes []string
	for _, h := range hosts {
		nodes = append(nodes, h.node)
	}
	var o cli.PushOutcome
	poll.Until(r.t, within, "a push of "+strings.Join(nodes, ",")+" through "+r.nodes[i], func() error {
		for _, node := range nodes {
			if text != "" {
				if _, errOut, code := r.cli(i, "assign", "--dir", r.dirs[i], "--set", "text="+text, "note", node); code != 0 {
					return fmt.Errorf("assign: exit %d: %s", code, errOut)
				}
			}
		}
		out, errOut, code := r.cli(i, append([]string{"push", "--dir", r.dirs[i], "--json", "--wait", "30s"}, nodes...)...)
		o = cli.PushOutcome{}
		if err := json.Unmarshal([]byte(out), &o); err != nil || code != 0 || !o.OK {
			return fmt.Errorf("push: exit %d: %+v: %s", code, o, errOut)
		}
		return nil
	})
	seqs := map[string]uint64{}
	for _, n := range o.Nodes {
		seqs[n.Node] = n.Seq
	}
	return seqs
}

// converged waits until every one of hosts holds text and applied what
// was last sent it, as controller i's answers say.
func (r *partRig) converged(i int, text string, hosts []partHost, within time.Duration) {
	r.t.Helper()
	for _, h := range hosts {
		poll.Until(r.t, within, h.node+" holds "+text, func() error {
			h.d.alive(r.t)
			got, _ := os.ReadFile(filepath.Join(h.root, "etc/note"))
			n := r.show(i, h.node)
			if string(got) == text+"\n" && n.AppliedSeq == n.SentSeq {
				return nil
			}
			return fmt.Errorf("%s holds %q, applied %d, sent %d", h.node, got, n.AppliedSeq, n.SentSeq)
		})
	}
}

// cut partitions controller i from the others: its namespace drops what
// goes to them and what comes from them. heal takes it back.
func (r *partRig) cut(i int) {
	r.t.Helper()
	for k, ip := range partCtlIPs {
		if k != i {
			r.s.in(r.nss[i], "iptables", "-A", "INPUT", "-s", ip, "-j", "DROP")
			r.s.in(r.nss[i], "iptables", "-A", "OUTPUT", "-d", ip, "-j", "DROP")
		}
	}
}

func (r *partRig) heal(i int) {
	r.t.Helper()
	r.s.in(r.nss[i], "iptables", "-F", "INPUT")
	r.s.in(r.nss[i], "iptables", "-F", "OUTPUT")
}

// checkSeqs fails the test if a host was seen applying a sequence below
// one it applied before.
func (r *partRig) checkSeqs() {
	r.t.Helper()
	for _, h := range r.hosts {
		if why, bad := h.seqs.backwards(); bad {
			r.t.Errorf("%s went backwards: %s", h.node, why)
		}
	}
}

// TestControllersPartitionedLeaderStepsDown: three controllers on
// machines of their own, the leader cut off from the other two by their
// network (its own CLI and its hosts reach it still). Within the lease's
// time one of the two leads and a push through it reaches the host on
// its side; the cut-off controller says it does not lead within the
// lease's TTL and a margin, and a write through its own bus is refused,
// naming the controllers it reaches, rather than carried out. Healed, it
// follows the new leader, the write it refused is nowhere, a push
// through it reaches every host, and no host was sent a sequence again
// or applied one below another.
func TestControllersPartitionedLeaderStepsDown(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three controllers in namespaces, their leader partitioned")
	r := newPartRig(t)
	old := r.leader([]int{0, 1, 2}, 30*time.Second)
	var others []int
	var otherIPs []string
	for i := range partCtlIPs {
		if i != old {
			others, otherIPs = append(others, i), append(otherIPs, partCtlIPs[i])
		}
	}
	// h1 is on a bus of the two that stay together, h2 on the one cut
	// off.
	r.join(old, "h1", "198.18.0.21", []string{partCtlIPs[old]})
	r.join(old, "h2", "198.18.0.22", otherIPs)
	h1, h2 := r.hosts[:1], r.hosts[1:]
	seqs := r.push(old, "one", r.hosts, 60*time.Second)
	r.converged(old, "one", r.hosts, 30*time.Second)

	r.cut(old)
	cut := time.Now()

	// The cut-off controller steps down within the TTL and a margin.
	poll.Until(t, meshdaemon.DefaultLeaseTTL+4*time.Second, r.nodes[old]+" no longer leads", func() error {
		rs, err := r.roles(old, 1)
		if err != nil {
			return err
		}
		role, ok := rs[r.server(old)]
		if ok && (role.Role == "follower" || role.Role == "candidate") {
			return nil
		}
		return fmt.Errorf("%+v", rs)
	})
	t.Logf("the partitioned leader stepped down %s after the cut", time.Since(cut).Round(time.Millisecond))

	// One of the other two leads, and a push through it reaches h1.
	lead := r.leader(others, 30*time.Second)
	t.Logf("%s leads %s after the cut", r.nodes[lead], time.Since(cut).Round(time.Millisecond))
	next := r.push(lead, "two", h1, 30*time.Second)
	t.Logf("a push through the new leader succeeded %s after the cut", time.Since(cut).Round(time.Millisecond))
	newer(t, "the push after the partition", map[string]uint64{"h1": seqs["h1"]}, next)
	r.converged(lead, "two", h1, 30*time.Second)

	// A write through the cut-off controller's bus is refused, naming
	// the controller it reaches, never carried out.
	// A write sent before its routes were given up (three missed pings)
	// is routed to the other side and goes unanswered for the verb's 30
	// s: the one after is refused.
	want := "reachable controllers: " + r.server(old) + " ("
	poll.Until(t, 75*time.Second, "a write through "+r.nodes[old]+" refused, naming it", func() error {
		out, errOut, code := r.cli(old, "assign", "--dir", r.dirs[old], "--set", "text=late", "note", "h2")
		if code == 0 {
			t.Fatalf("a write through the partitioned controller %s succeeded:\n%s", r.nodes[old], out)
		}
		if strings.Contains(errOut, want) && strings.Contains(errOut, " of 3") {
			return nil
		}
		return fmt.Errorf("exit %d, not %q: %s", code, want, errOut)
	})
	if got, _ := os.ReadFile(filepath.Join(h2[0].root, "etc/note")); string(got) != "one\n" {
		t.Errorf("h2, on the partitioned controller's bus, holds %q", got)
	}

	// Healed: the old leader follows, and every controller names one
	// leader. The heal may move the lease (the bus's streams elect their
	// leaders again as the cut-off peer comes back): never to two at
	// once.
	r.heal(old)
	healed := time.Now()
	now := r.leader([]int{0, 1, 2}, 60*time.Second)
	t.Logf("every controller agrees %s leads %s after the heal (%s led before it)", r.nodes[now], time.Since(healed).Round(time.Millisecond), r.nodes[lead])
	// The refused write is nowhere: h2 pushed as it stands holds what it
	// held.
	r.push(old, "", h2, 60*time.Second)
	r.converged(old, "one", h2, 30*time.Second)

	seqs = map[string]uint64{"h1": next["h1"], "h2": seqs["h2"]}
	next = r.push(old, "three", r.hosts, 60*time.Second)
	newer(t, "the push after the heal", seqs, next)
	r.converged(old, "three", r.hosts, 30*time.Second)
	r.checkSeqs()
}
