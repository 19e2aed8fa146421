package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/cli"
	meshdaemon "github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// ctlCluster is three controllers of one mesh, each a process of its own
// on loopback with its own state directory, bus, HTTP and route ports:
// genesis with --cluster, and two that joined it with a controller's
// token; and the hosts joined to them.
type ctlCluster struct {
	dirs  []string  // each controller's state directory
	nodes []string  // each controller's own node
	ds    []*daemon // each controller's process: nil while it is down
	hosts []ctlHost
}

// ctlHost is a host of the cluster: its node, where its declared paths
// resolve, and the sequences it applied as the test saw them.
type ctlHost struct {
	node, dir, root string
	d               *daemon
	seqs            *seqWatch
}

// noteModule is the module the cluster's tests push: one file, /etc/note,
// holding its setting "text".
const noteModule = `{"name": "note", "version": "1",
	"settings": [{"name": "text", "type": "string", "required": true}],
	"resources": [{"file": {"path": "/etc/note", "content": "${text}\n"}}]}`

// newControllers makes the cluster and its hosts, the module note
// registered and assigned to every host, not pushed.
func newControllers(t testing.TB, hosts int) *ctlCluster {
	t.Helper()
	m := newMesh(t, "--cluster", port(t))
	c := &ctlCluster{dirs: []string{m.dir}, nodes: []string{m.node}, ds: []*daemon{m.d}}
	for _, node := range []string{"ctl2", "ctl3"} {
		token := m.token(t, node, "--controller")
		dir := filepath.Join(t.TempDir(), node)
		d := start(t, "controller", "--join", token, "--dir", dir, "--bus", port(t), "--http", port(t),
			"--cluster", port(t), "--dns", port(t), "--dns-upstream", deadUpstream, "--docker", "none", "--address", "127.0.0.1")
		waitController(t, d, dir)
		c.dirs, c.nodes, c.ds = append(c.dirs, dir), append(c.nodes, node), append(c.ds, d)
	}
	c.leader(t, 60*time.Second)
	mod := filepath.Join(t.TempDir(), "note")
	os.MkdirAll(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "module.json"), []byte(noteModule), 0o644)
	// A controller that answered a join starts again in the grown peer
	// set a moment after: a call cut short by it is made again.
	poll.Until(t, 60*time.Second, "module note registered", func() error {
		if _, errOut, code := runMesh(t, "module", "register", "--dir", m.dir, mod); code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		return nil
	})
	for i := range hosts {
		node := fmt.Sprintf("h%d", i+1)
		root := t.TempDir()
		dir, d := m.join(t, node, "--root", root)
		mustRun(t, "assign", "--dir", m.dir, "--set", "text=first", "note", node)
		c.hosts = append(c.hosts, ctlHost{node: node, dir: dir, root: root, d: d, seqs: watchSeqs(t, dir)})
	}
	return c
}

// roles asks every controller reachable through dir's bus what it is,
// and returns the answers, by server name: once want have answered, or
// what came within 3 s (an answer reads the lease, within 2 s).
func (c *ctlCluster) roles(t testing.TB, dir string, want int) (map[string]spec.ControllerRole, error) {
	// A connection of its own: one kept would end with a controller
	// killed.
	op, err := cli.DialOperator(t.Context(), dir)
	if err != nil {
		return nil, err
	}
	defer op.Close()
	return askRoles(op, want)
}

// askRoles asks every controller reachable through op what it is, and
// returns the answers by server name: once want have answered, or what
// came within 3 s (an answer reads the lease, within 2 s).
func askRoles(op *cli.Operator, want int) (map[string]spec.ControllerRole, error) {
	nc := op.Conn()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(spec.ControllerRoleSubject, inbox, []byte("{}")); err != nil {
		return nil, err
	}
	got := map[string]spec.ControllerRole{}
	for deadline := time.Now().Add(3 * time.Second); len(got) < want; {
		msg, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			break
		}
		var r spec.ControllerRole
		if spec.DecodeReply(msg.Data, &r) == nil && r.Server != "" {
			got[r.Server] = r
		}
	}
	return got, nil
}

// server is the cluster server name of controller i.
func (c *ctlCluster) server(t testing.TB, i int) string {
	t.Helper()
	st, err := meshdaemon.ReadClusterState(c.dirs[i])
	if err != nil || st == nil {
		t.Fatalf("the cluster's state of %s: %v", c.dirs[i], err)
	}
	return st.Server
}

// up is the indexes of the controllers running.
func (c *ctlCluster) up() []int {
	var up []int
	for i, d := range c.ds {
		if d != nil {
			up = append(up, i)
		}
	}
	return up
}

// leader waits until one controller leads, as every running one says,
// and returns its index.
func (c *ctlCluster) leader(t testing.TB, within time.Duration) int {
	t.Helper()
	found := -1
	poll.Until(t, within, "one controller leads", func() error {
		up := c.up()
		for _, i := range up {
			c.ds[i].alive(t)
		}
		rs, err := c.roles(t, c.dirs[up[0]], len(up))
		if err != nil {
			return err
		}
		found = -1
		var why []string
		for _, i := range up {
			r := rs[c.server(t, i)]
			why = append(why, fmt.Sprintf("%s: %+v", c.nodes[i], r))
			if r.Role == "leader" {
				if found >= 0 {
					t.Fatalf("two controllers lead at once: %s", strings.Join(why, "; "))
				}
				found = i
			}
		}
		if found < 0 {
			return errors.New(strings.Join(why, "; "))
		}
		for _, i := range up {
			if r := rs[c.server(t, i)]; r.Leader != c.server(t, found) {
				return fmt.Errorf("%s leads, %s says %+v", c.nodes[found], c.nodes[i], r)
			}
		}
		return nil
	})
	return found
}

// kill kills controller i with SIGKILL.
func (c *ctlCluster) kill(t testing.TB, i int) {
	t.Helper()
	c.ds[i].kill9(t)
	c.ds[i] = nil
}

// restart runs controller i again with no flag but its directory.
func (c *ctlCluster) restart(t testing.TB, i int) {
	t.Helper()
	c.ds[i] = start(t, "controller", "--dir", c.dirs[i])
	waitController(t, c.ds[i], c.dirs[i])
}

// waitController waits until the controller kept in dir wrote where it
// listens and, when it serves HTTP (a controller that follows may not),
// its /healthz is ready.
func waitController(t testing.TB, d *daemon, dir string) {
	t.Helper()
	var a spec.Addrs
	poll.Until(t, 60*time.Second, dir+"/addrs.json written", func() error {
		d.alive(t)
		body, err := os.ReadFile(filepath.Join(dir, "addrs.json"))
		if err != nil || json.Unmarshal(body, &a) != nil || a.Bus == "" {
			return fmt.Errorf("%s %v", body, err)
		}
		return nil
	})
	if a.HTTP != "" {
		poll.Until(t, 60*time.Second, dir+" /healthz ready", func() error {
			return healthy(a.HTTP)
		})
	}
}

// pushText sets note's text on every host and pushes it through
// controller i, retrying while no controller serves the writes, within.
// It returns each host's sequence of the push.
func (c *ctlCluster) pushText(t testing.TB, i int, text string, within time.Duration) map[string]uint64 {
	t.Helper()
	var o cli.PushOutcome
	poll.Until(t, within, "a push through "+c.nodes[i], func() error {
		c.ds[i].alive(t)
		for _, h := range c.hosts {
			if _, errOut, code := runMesh(t, "assign", "--dir", c.dirs[i], "--set", "text="+text, "note", h.node); code != 0 {
				return fmt.Errorf("assign: exit %d: %s", code, errOut)
			}
		}
		var code int
		o, code = pushJSON(t, c.dirs[i])
		if code != 0 || !o.OK {
			return fmt.Errorf("push: exit %d: %+v", code, o)
		}
		return nil
	})
	// The hosts' sequences: the controllers' own nodes hold no module,
	// and a push sends them nothing new.
	hosts := map[string]bool{}
	for _, h := range c.hosts {
		hosts[h.node] = true
	}
	seqs := map[string]uint64{}
	for _, n := range o.Nodes {
		if hosts[n.Node] {
			seqs[n.Node] = n.Seq
		}
	}
	return seqs
}

// converged waits until every host holds text and applied what was last
// sent it, as controller i's answers say.
func (c *ctlCluster) converged(t testing.TB, i int, text string, within time.Duration) {
	t.Helper()
	for _, h := range c.hosts {
		poll.Until(t, within, h.node+" holds "+text, func() error {
			h.d.alive(t)
			got, _ := os.ReadFile(filepath.Join(h.root, "etc/note"))
			n := nodeShow(t, c.dirs[i], h.node)
			if string(got) == text+"\n" && n.AppliedSeq == n.SentSeq {
				return nil
			}
			return fmt.Errorf("%s holds %q, applied %d, sent %d", h.node, got, n.AppliedSeq, n.SentSeq)
		})
	}
}

// seqWatch is the applied sequences one host's state.json held, in the
// order the test saw them.
type seqWatch struct {
	mu   sync.Mutex
	seqs []uint64
}

// watchSeqs reads the applied sequence of the host kept in dir every
// 20 ms until the test ends, keeping each change.
func watchSeqs(t testing.TB, dir string) *seqWatch {
	w := &seqWatch{}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var st struct {
				AppliedSeq uint64 `json:"applied_seq"`
			}
			body, err := os.ReadFile(filepath.Join(dir, "host", "state.json"))
			if err != nil || json.Unmarshal(body, &st) != nil {
				continue
			}
			w.mu.Lock()
			if len(w.seqs) == 0 || w.seqs[len(w.seqs)-1] != st.AppliedSeq {
				w.seqs = append(w.seqs, st.AppliedSeq)
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(done); <-stopped })
	return w
}

// backwards is the first step back in the sequences seen, if any.
func (w *seqWatch) backwards() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := 1; k < len(w.seqs); k++ {
		if w.seqs[k] < w.seqs[k-1] {
			return fmt.Sprintf("applied %d after %d (all: %v)", w.seqs[k], w.seqs[k-1], w.seqs), true
		}
	}
	return "", false
}

// newer fails t unless every host's sequence in now is above the one in
// before: no sequence reused or going backwards across the pushes.
func newer(t testing.TB, what string, before, now map[string]uint64) {
	t.Helper()
	for node, seq := range now {
		if seq <= before[node] {
			t.Errorf("%s: %s was sent declaration %d, after %d", what, node, seq, before[node])
		}
	}
}

// checkSeqs fails t if a host was seen applying a sequence below one it
// applied before.
func (c *ctlCluster) checkSeqs(t testing.TB) {
	t.Helper()
	for _, h := range c.hosts {
		if why, bad := h.seqs.backwards(); bad {
			t.Errorf("%s went backwards: %s", h.node, why)
		}
	}
}

// TestControllersLeaderKilledAnotherPushes: with three controllers, the
// leader killed with SIGKILL, a push through a controller left succeeds
// within the lease's time, every host converges and no host is sent a
// sequence it was sent before or applies one below another; the killed
// controller, run again with no flag, follows, and a push through it
// succeeds. With two of three down, a push through the last is refused
// and status fails, each naming the controllers reachable and that none
// leads, while the hosts keep serving; one back, pushes go through again.
func TestControllersLeaderKilledAnotherPushes(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three controllers, their leader killed and a push through another")
	c := newControllers(t, 2)
	// A domain declared through the leader: the intermediate it issues
	// is the one the next leader signs with, and hands in the CA chain
	// of every declaration (another would make the killed leader's own
	// node due, and the push after the kill wait for it).
	lead := c.leader(t, 30*time.Second)
	mustRun(t, "ca", "domain", "add", "--dir", c.dirs[lead], "example.org")
	declared := caDomains(t, c.dirs[lead])
	seqs := c.pushText(t, 0, "one", 60*time.Second)
	c.converged(t, 0, "one", 30*time.Second)

	lead = c.leader(t, 30*time.Second)
	other := (lead + 1) % 3
	killed := time.Now()
	c.kill(t, lead)
	next := c.pushText(t, other, "two", 60*time.Second)
	t.Logf("failover: the leader killed to a push's success through another: %s", time.Since(killed).Round(time.Millisecond))
	newer(t, "the push after the leader was killed", seqs, next)
	c.converged(t, other, "two", 30*time.Second)
	c.checkSeqs(t)
	if now := caDomains(t, c.dirs[other]); now.Intermediate != declared.Intermediate || len(now.Domains) != 1 || !now.Domains[0].Signed {
		t.Errorf("the next leader's CA: %+v; want intermediate %s signing example.org, as the killed leader issued", now, declared.Intermediate)
	}

	c.restart(t, lead)
	c.leader(t, 60*time.Second)
	seqs = next
	next = c.pushText(t, lead, "three", 60*time.Second)
	newer(t, "the push through the restarted controller", seqs, next)
	c.converged(t, lead, "three", 30*time.Second)

	// Two of three down: refused, the reachable controller named, and how
	// many the cluster has.
	lead = c.leader(t, 30*time.Second)
	last := (lead + 1) % 3
	c.kill(t, lead)
	c.kill(t, (lead+2)%3)
	want := "reachable controllers: " + c.server(t, last) + " (follower) of 3"
	poll.Until(t, 60*time.Second, "a push through the last controller refused, naming it", func() error {
		c.ds[last].alive(t)
		out, errOut, code := runMesh(t, "push", "--dir", c.dirs[last], "--wait", "20s")
		if code == 0 {
			t.Fatalf("a push with two of three controllers down succeeded:\n%s", out)
		}
		if !strings.Contains(errOut, want) {
			return fmt.Errorf("exit %d, not %q: %s", code, want, errOut)
		}
		return nil
	})
	// Status says why: it fails, naming the reachable controller and
	// that none leads.
	poll.Until(t, 30*time.Second, "status through the last controller failing, saying why", func() error {
		out, errOut, code := runMesh(t, "status", "--dir", c.dirs[last])
		if code == 0 {
			t.Fatalf("status with two of three controllers down exits 0:\n%s", out)
		}
		why := want + ", none leading"
		if !strings.Contains(errOut, "status: no controller answers") || !strings.Contains(errOut, why) {
			return fmt.Errorf("exit %d, not %q: %s", code, why, errOut)
		}
		return nil
	})
	for _, h := range c.hosts {
		if got, _ := os.ReadFile(filepath.Join(h.root, "etc/note")); string(got) != "three\n" {
			t.Errorf("%s holds %q with two controllers down", h.node, got)
		}
	}
	c.restart(t, lead)
	seqs = next
	next = c.pushText(t, last, "four", 90*time.Second)
	newer(t, "the push with one controller back", seqs, next)
	c.converged(t, last, "four", 30*time.Second)
	c.checkSeqs(t)
}

// TestControllersKilledTogetherLoseNothing: the three controllers killed
// with SIGKILL at once and run again with no flag lose nothing they
// acknowledged (the module registered, the last push's sequences, the
// modules listed the same); a controller's mesh.db deleted is rebuilt
// from the log at its restart, and every controller's view then holds
// the same modules, assignments and declarations.
func TestControllersKilledTogetherLoseNothing(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three controllers killed together and run again")
	c := newControllers(t, 1)
	seqs := c.pushText(t, 0, "one", 60*time.Second)
	c.converged(t, 0, "one", 30*time.Second)
	modules := mustRun(t, "module", "list", "--json", "--dir", c.dirs[0])

	var wg sync.WaitGroup
	for i := range c.ds {
		wg.Go(func() { c.ds[i].kill9(t) })
	}
	wg.Wait()
	for i := range c.ds {
		c.ds[i] = nil
	}
	for i := range c.ds {
		c.ds[i] = start(t, "controller", "--dir", c.dirs[i])
	}
	for i := range c.ds {
		waitController(t, c.ds[i], c.dirs[i])
	}
	lead := c.leader(t, 90*time.Second)
	for _, i := range []int{lead, (lead + 1) % 3} {
		if got := mustRun(t, "module", "list", "--json", "--dir", c.dirs[i]); got != modules {
			t.Errorf("modules through %s after the restart:\n%s\nwant\n%s", c.nodes[i], got, modules)
		}
	}
	for _, h := range c.hosts {
		if n := nodeShow(t, c.dirs[lead], h.node); n.SentSeq != seqs[h.node] {
			t.Errorf("%s was sent %d before the controllers were killed; after, %d", h.node, seqs[h.node], n.SentSeq)
		}
	}
	next := c.pushText(t, lead, "two", 60*time.Second)
	newer(t, "the push after the restart", seqs, next)
	c.converged(t, lead, "two", 30*time.Second)

	// The leader's view deleted: it runs again from the log, and another
	// leads meanwhile.
	c.ds[lead].stop(t)
	c.ds[lead] = nil
	for _, f := range []string{"mesh.db", "mesh.db-wal", "mesh.db-shm"} {
		os.Remove(filepath.Join(c.dirs[lead], "controller", f))
	}
	c.restart(t, lead)
	c.leader(t, 60*time.Second)
	if got := mustRun(t, "module", "list", "--json", "--dir", c.dirs[lead]); got != modules {
		t.Errorf("modules after %s's view was rebuilt:\n%s\nwant\n%s", c.nodes[lead], got, modules)
	}
	poll.Until(t, 60*time.Second, "every controller's view the same", func() error {
		var views []string
		for i := range c.dirs {
			views = append(views, viewOf(t, c.dirs[i]))
		}
		if views[0] == views[1] && views[1] == views[2] {
			return nil
		}
		return errors.New(strings.Join(views, "\n---\n"))
	})
	c.checkSeqs(t)
}

// viewOf is what the store kept in dir holds of the modules, their
// assignments and the declarations sent, read from its file while the
// controller runs.
func viewOf(t testing.TB, dir string) string {
	t.Helper()
	db, err := sql.Open("sqlite", store.DSN(filepath.Join(dir, "controller", "mesh.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var lines []string
	for _, q := range []string{
		`SELECT name || ' ' || version FROM modules`,
		`SELECT module || ' ' || node FROM assignments`,
		`SELECT node || ' ' || seq FROM declarations`,
	} {
		rows, err := textRows(t.Context(), db, q)
		if err != nil {
			return err.Error()
		}
		lines = append(lines, rows...)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// textRows are the rows of q, a query of one text column, on db.
func textRows(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		lines = append(lines, s)
	}
	return lines, rows.Err()
}

// caDomains is mesh ca domain list --json through dir's controller.
func caDomains(t testing.TB, dir string) spec.CADomainListResult {
	t.Helper()
	var res spec.CADomainListResult
	if err := json.Unmarshal([]byte(mustRun(t, "ca", "domain", "list", "--dir", dir, "--json")), &res); err != nil {
		t.Fatal(err)
	}
	return res
}
