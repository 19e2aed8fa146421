package e2e

import (
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	meshdaemon "github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/store"
)

// TestControllersBackupRestoresAsOne: a backup taken through a follower
// of three controllers, the three then killed with SIGKILL, restored into
// a new directory and run with mesh controller --dir alone, runs as one
// controller: a cluster of its own server only (a new server name, the
// follower's route address), no controller answering who leads, pushes
// served. It reads the modules, nodes and assignments the cluster held at
// the backup; the host, which applied a push made after the backup,
// takes the restored declaration (the backup's text and secret, opened
// by the at-rest key the follower held) numbered past any it saw, and the
// next push is numbered above. The third controller's node, removed, joins
// the restored controller again with a new controller's token on a new
// directory: the two elect a leader, and a push through the joined one
// reaches the host.
func TestControllersBackupRestoresAsOne(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three controllers backed up through a follower, killed, restored as one and joined again")
	c := newControllers(t, 1)
	h := c.hosts[0]
	lead := c.leader(t, 30*time.Second)
	mod := filepath.Join(t.TempDir(), "vault")
	os.MkdirAll(mod, 0o755)
	os.WriteFile(filepath.Join(mod, "module.json"), []byte(`{"name": "vault", "version": "1",
		"settings": [{"name": "token", "type": "string", "required": true, "secret": true}],
		"resources": [{"file": {"path": "/etc/vault/token", "content": "token=${token}\n"}}]}`), 0o644)
	secret := "ClusterSecret-" + strings.Repeat("7", 12)
	poll.Until(t, 60*time.Second, "module vault registered and assigned", func() error {
		if _, errOut, code := runMesh(t, "module", "register", "--dir", c.dirs[lead], mod); code != 0 {
			return fmt.Errorf("register: exit %d: %s", code, errOut)
		}
		if _, errOut, code := runMesh(t, "assign", "--dir", c.dirs[lead], "--set", "token="+secret, "vault", h.node); code != 0 {
			return fmt.Errorf("assign: exit %d: %s", code, errOut)
		}
		return nil
	})
	c.pushText(t, lead, "one", 60*time.Second)
	c.converged(t, lead, "one", 30*time.Second)
	token := filepath.Join(h.root, "etc/vault/token")
	if got, _ := os.ReadFile(token); string(got) != "token="+secret+"\n" {
		t.Fatalf("%s holds %q before the backup", h.node, got)
	}
	modules := mustRun(t, "module", "list", "--json", "--dir", c.dirs[lead])
	nodes := (&testMesh{dir: c.dirs[lead]}).nodeNames(t)
	assigned := assignmentsOf(t, c.dirs[lead])

	// The backup through a follower, once its view holds what the leader
	// acknowledged: mesh backup copies the view kept in its directory.
	lead = c.leader(t, 30*time.Second)
	f := (lead + 1) % 3
	poll.Until(t, 30*time.Second, c.nodes[f]+"'s view holds the push", func() error {
		want, got := viewOf(t, c.dirs[lead]), viewOf(t, c.dirs[f])
		if got == want {
			return nil
		}
		return fmt.Errorf("%s's view:\n%s\nthe leader's:\n%s", c.nodes[f], got, want)
	})
	pass := filepath.Join(t.TempDir(), "pass")
	os.WriteFile(pass, []byte("correct horse battery staple\n"), 0o600)
	file := filepath.Join(t.TempDir(), "cluster.backup")
	mustRun(t, "backup", "--dir", c.dirs[f], "--passphrase-file", pass, file)
	was, err := meshdaemon.ReadClusterState(c.dirs[f])
	if err != nil || was == nil {
		t.Fatalf("the cluster's state of %s: %v", c.nodes[f], err)
	}
	var servers []string
	for i := range c.dirs {
		servers = append(servers, c.server(t, i))
	}

	// A push after the backup, which the restored store never saw.
	c.pushText(t, lead, "two", 60*time.Second)
	c.converged(t, lead, "two", 30*time.Second)
	seen := nodeShow(t, c.dirs[lead], h.node).AppliedSeq

	var wg sync.WaitGroup
	for i := range c.ds {
		wg.Go(func() { c.ds[i].kill9(t) })
	}
	wg.Wait()
	for i := range c.ds {
		c.ds[i] = nil
	}

	restored := filepath.Join(t.TempDir(), "restored")
	mustRun(t, "restore", "--dir", restored, "--passphrase-file", pass, file)
	d := start(t, "controller", "--dir", restored)
	waitController(t, d, restored)

	// One controller: a cluster of its own new server, on the follower's
	// route address, which nothing campaigns in (no controller answers
	// who leads), and which serves the writes.
	st, err := meshdaemon.ReadClusterState(restored)
	if err != nil || st == nil {
		t.Fatalf("the restored controller's cluster state: %+v, %v", st, err)
	}
	if len(st.Peers) != 1 || st.Peers[0].Server != st.Server || slices.Contains(servers, st.Server) || st.Listen != was.Listen {
		t.Errorf("the restored controller's cluster: %+v; want one new server (not one of %v) on %s", st, servers, was.Listen)
	}
	if got := strings.TrimSpace(mustRun(t, "cluster", "show", "--json", "--dir", restored)); got != "[]" {
		t.Errorf("mesh cluster show on the restored controller: %s; want no controller answering who leads", got)
	}
	if got := mustRun(t, "module", "list", "--json", "--dir", restored); got != modules {
		t.Errorf("modules after the restore:\n%s\nwant\n%s", got, modules)
	}
	if got := (&testMesh{dir: restored}).nodeNames(t); got != nodes {
		t.Errorf("nodes after the restore: %s, want %s", got, nodes)
	}
	if got := assignmentsOf(t, restored); got != assigned {
		t.Errorf("assignments after the restore:\n%s\nwant\n%s", got, assigned)
	}
	// The host reconnects to the follower's bus address, which it holds
	// among the controllers', and takes the restored declaration.
	poll.Until(t, 90*time.Second, h.node+" holds the backup's text and secret", func() error {
		d.alive(t)
		h.d.alive(t)
		note, _ := os.ReadFile(filepath.Join(h.root, "etc/note"))
		tok, _ := os.ReadFile(token)
		n := nodeShow(t, restored, h.node)
		if string(note) == "one\n" && string(tok) == "token="+secret+"\n" && n.AppliedSeq > seen && n.AppliedSeq == n.SentSeq {
			return nil
		}
		return fmt.Errorf("%s holds %q and %q, applied %d, sent %d, saw %d", h.node, note, tok, n.AppliedSeq, n.SentSeq, seen)
	})
	mustRun(t, "assign", "--dir", restored, "--set", "text=three", "note", h.node)
	o, code := pushJSON(t, restored, h.node)
	if code != 0 || !o.OK {
		t.Fatalf("push after the restore: exit %d: %+v", code, o)
	}
	if n := nodeShow(t, restored, h.node); n.SentSeq <= seen+1 || n.AppliedSeq != n.SentSeq {
		t.Fatalf("after the restore %s was sent %d and applied %d; before, it applied %d", h.node, n.SentSeq, n.AppliedSeq, seen)
	}
	if got, _ := os.ReadFile(filepath.Join(h.root, "etc/note")); string(got) != "three\n" {
		t.Fatalf("%s holds %q after the push after the restore", h.node, got)
	}

	// The third controller's machine joins again: its old node removed, a
	// new controller's token, a new directory.
	third := 3 - lead - f
	mustRun(t, "node", "remove", "--dir", restored, c.nodes[third])
	r := &ctlCluster{dirs: []string{restored}, nodes: []string{c.nodes[f]}, ds: []*daemon{d}, hosts: c.hosts}
	tok := (&testMesh{dir: restored}).token(t, c.nodes[third], "--controller")
	dir := filepath.Join(t.TempDir(), c.nodes[third])
	j := start(t, "controller", "--join", tok, "--dir", dir, "--bus", port(t), "--http", port(t),
		"--cluster", port(t), "--dns", port(t), "--dns-upstream", deadUpstream, "--docker", "none", "--address", "127.0.0.1")
	waitController(t, j, dir)
	r.dirs, r.nodes, r.ds = append(r.dirs, dir), append(r.nodes, c.nodes[third]), append(r.ds, j)
	r.leader(t, 90*time.Second)
	if st, err := meshdaemon.ReadClusterState(restored); err != nil || len(st.Peers) != 2 {
		t.Errorf("the restored controller's cluster after the join: %+v, %v; want two peers", st, err)
	}
	r.pushText(t, 1, "four", 90*time.Second)
	r.converged(t, 1, "four", 30*time.Second)
	c.checkSeqs(t)
}

// assignmentsOf is what the store kept in dir holds of the assignments:
// each module, node and its settings as kept (a secret one sealed).
func assignmentsOf(t testing.TB, dir string) string {
	t.Helper()
	db, err := sql.Open("sqlite", store.DSN(filepath.Join(dir, "controller", "mesh.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lines, err := textRows(t.Context(), db, `SELECT module || ' ' || node || ' ' || settings FROM assignments ORDER BY module, node`)
	if err != nil {
		t.Fatalf("read the assignments in %s: %v", dir, err)
	}
	return strings.Join(lines, "\n")
}
