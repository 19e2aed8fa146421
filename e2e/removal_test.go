package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/miekg/dns"
)

// TestRemovedNodeJoinedAgainStartsFromNothing: a machine that joins again
// under a removed node's name, with a new directory, is delivered none of
// the removed node's declarations: nothing is applied until a push, and the
// push brings exactly what is assigned now, numbered from 1.
func TestRemovedNodeJoinedAgainStartsFromNothing(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	mustRun(t, "module", "register", "--dir", m.dir,
		fileModule(t, "old", "/etc/old.conf", "password=hunter2\n"), fileModule(t, "current", "/etc/current.conf", "hello\n"))

	root1 := t.TempDir()
	dir1, _ := m.join(t, "gamma", "--root", root1)
	first := checkSealKey(t, dir1, nodeShow(t, m.dir, "gamma").SealKey)
	mustRun(t, "assign", "--dir", m.dir, "old", "gamma")
	for i := range 2 {
		if o, code := pushJSON(t, m.dir, "gamma"); code != 0 || !o.OK {
			t.Fatalf("push %d to the first gamma: exit %d %+v", i+1, code, o)
		}
	}
	if _, err := os.Stat(filepath.Join(root1, "etc/old.conf")); err != nil {
		t.Fatalf("the first gamma did not apply its declaration: %v", err)
	}
	if out := mustRun(t, "node", "remove", "--dir", m.dir, "gamma"); !regexp.MustCompile(`^node gamma removed\nnames: roster \d+ sent without it, to 1 node\(s\)\n$`).MatchString(out) {
		t.Fatalf("node remove said %q", out)
	}

	root2 := t.TempDir()
	dir2, _ := m.join(t, "gamma", "--root", root2)
	// The new gamma made a sealing key of its own: the removed one's is
	// forgotten with it, and opens nothing sealed to the new one.
	second := checkSealKey(t, dir2, nodeShow(t, m.dir, "gamma").SealKey)
	if second.Public() == first.Public() {
		t.Fatal("the new gamma's sealing key is the removed one's")
	}
	if text, err := seal.SealTo(second.Public(), []byte("new gamma")); err != nil {
		t.Fatal(err)
	} else if _, err := first.Open(text); err == nil {
		t.Fatal("the removed gamma's key opens what is sealed to the new one")
	}
	if n := nodeShow(t, m.dir, "gamma"); n.LastReport != nil || n.SentSeq != 0 || n.AppliedSeq != 0 {
		t.Fatalf("the new gamma before any push: sent %d, applied %d, report %+v", n.SentSeq, n.AppliedSeq, n.LastReport)
	}

	// Whatever the stream kept would have been delivered the moment the host
	// subscribed, ahead of this push: the push is the first it applies.
	mustRun(t, "assign", "--dir", m.dir, "current", "gamma")
	o, code := pushJSON(t, m.dir, "gamma")
	if code != 0 || !o.OK || len(o.Nodes) != 1 || o.Nodes[0].Seq != 1 || o.Nodes[0].Error != "" {
		t.Fatalf("first push to the new gamma: exit %d %+v", code, o)
	}
	if got := outcomes(o)["gamma"]; len(got) != 1 || got["current:file:/etc/current.conf"] != spec.Created {
		t.Fatalf("first push to the new gamma did %v, want only current's file created", got)
	}
	if _, err := os.Stat(filepath.Join(root2, "etc/old.conf")); !os.IsNotExist(err) {
		t.Fatalf("the new gamma has the removed gamma's file: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root2, "etc/current.conf")); string(b) != "hello\n" {
		t.Fatalf("/etc/current.conf on the new gamma: %q %v", b, err)
	}
	var st struct {
		Seq uint64 `json:"seq"`
	}
	body, _ := os.ReadFile(filepath.Join(dir2, "host", "state.json"))
	if err := json.Unmarshal(body, &st); err != nil || st.Seq != 1 {
		t.Fatalf("the new gamma keeps sequence %d (%v), want 1", st.Seq, err)
	}
}

// TestRemovedHostExitsSayingSo: the host of a removed node says it was
// removed and how to join again, and exits with code 3, both while it runs
// and when it is started again. Each case has a mesh of its own and they
// run at once: each waits some seconds for the host to tell the bus's
// refusals from a failure that passes. The cases run in this test's own
// turn, not as parallel subtests, which would wait for a turn behind every
// test released before them and end the package's run.
func TestRemovedHostExitsSayingSo(t *testing.T) {
	t.Parallel()
	wantRemoved := func(t *testing.T, d *daemon) {
		t.Helper()
		if code := d.exited(t, 30*time.Second); code != 3 {
			t.Fatalf("the removed host exited with %d, want 3\n%s", code, d.out.String())
		}
		for _, want := range []string{`node "beta": removed from the mesh`, "mesh token create beta", "--join TOKEN"} {
			if !strings.Contains(d.out.String(), want) {
				t.Errorf("the removed host's output does not say %q:\n%s", want, d.out.String())
			}
		}
	}
	var cases sync.WaitGroup
	defer cases.Wait()
	cases.Go(func() {
		t.Run("running", func(t *testing.T) {
			m := newMesh(t)
			_, h := m.join(t, "beta")

			// The controller's own node is refused: its host runs in the
			// controller's process.
			if _, errOut, code := runMesh(t, "node", "remove", "--dir", m.dir, "alpha"); code != 1 || !strings.Contains(errOut, "this controller's own machine") {
				t.Fatalf("removing the controller's own node: exit %d: %s", code, errOut)
			}

			removed := time.Now()
			mustRun(t, "node", "remove", "--dir", m.dir, "beta")
			wantRemoved(t, h)
			t.Logf("the removed host exited %s after the removal", time.Since(removed).Round(100*time.Millisecond))
			if got := m.nodeNames(t); got != "alpha" {
				t.Errorf("nodes after the removal: %s", got)
			}
		})
	})
	// Started again after the removal, it connects for the first time with
	// a credential the bus refuses: it says so too, rather than waiting for
	// ever.
	cases.Go(func() {
		t.Run("started again", func(t *testing.T) {
			m := newMesh(t)
			hostDir, h := m.join(t, "beta")
			h.stop(t)
			mustRun(t, "node", "remove", "--dir", m.dir, "beta")
			again := start(t, "host", "--dir", hostDir, "--dns", port(t), "--dns-upstream", deadUpstream)
			wantRemoved(t, again)
			if strings.Contains(again.out.String(), "host running") {
				t.Errorf("the removed host said it runs:\n%s", again.out.String())
			}
			if got := m.nodeNames(t); got != "alpha" {
				t.Errorf("nodes after the removal: %s", got)
			}
		})
	})
}

// TestRemovedNodesNamesGoWithoutAPush: a node's removal sends the roster
// without it: the names its routes served, its public name and its own
// stop resolving on every other node with no push.
func TestRemovedNodesNamesGoWithoutAPush(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--root", t.TempDir())
	betaDir, _ := m.join(t, "beta", "--root", t.TempDir())
	m.join(t, "gamma", "--root", t.TempDir())
	resolvers := map[string]string{"alpha": m.addrs.DNS, "beta": dnsAddr(t, betaDir)}
	mustRun(t, "module", "register", "--dir", m.dir, example("hello"))
	mustRun(t, "assign", "--dir", m.dir, "--set", "token=t", "--set", "domain=gamma.example.org", "hello", "gamma")
	push(t, m.dir)
	names := []string{"hello.gamma.internal", "hello.gamma.example.org", "gamma.internal"}
	for node, addr := range resolvers {
		for _, name := range names {
			if r, err := ask(t, addr, name, dns.TypeA); err != nil || r.Rcode != dns.RcodeSuccess || answers(r) != "127.0.0.2" {
				t.Fatalf("%s's resolver, %s, before the removal: %v %v, want 127.0.0.2", node, name, r, err)
			}
		}
	}

	removed := time.Now()
	if out := mustRun(t, "node", "remove", "--dir", m.dir, "gamma"); !regexp.MustCompile(`^node gamma removed\nnames: roster \d+ sent without it, to 2 node\(s\)\n$`).MatchString(out) {
		t.Errorf("node remove said %q, want the node removed and the roster sent to the 2 left", out)
	}
	// The mesh's names are NXDOMAIN; the public name is the mesh's no
	// more, so it goes to the upstream (a dead one: SERVFAIL).
	for node, addr := range resolvers {
		for _, name := range names {
			poll.Until(t, 20*time.Second, node+"'s resolver no longer answers "+name, func() error {
				r, err := ask(t, addr, name, dns.TypeA)
				if err != nil {
					return err
				}
				if strings.HasSuffix(name, ".internal") {
					if r.Rcode == dns.RcodeNameError && r.Authoritative {
						return nil
					}
					return errors.New(r.String())
				}
				if len(r.Answer) == 0 && !r.Authoritative {
					return nil
				}
				return errors.New(r.String())
			})
		}
	}
	t.Logf("the removed node's names gone from every resolver %s after the removal", time.Since(removed).Round(10*time.Millisecond))
	// The names that stay are still answered.
	if r, err := ask(t, resolvers["beta"], "alpha.internal", dns.TypeA); err != nil || answers(r) != "127.0.0.1" {
		t.Errorf("beta's resolver, alpha.internal, after the removal: %v %v", r, err)
	}
	for _, e := range call(t, m.dir, spec.Audit, spec.AuditRequest{Since: removed}).Entries {
		if e.Verb == spec.Push.Name {
			t.Errorf("a push after the removal: %+v", e)
		}
	}
}
