package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/cli"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/mesh"
)

// The controllers' failures a process meets: its leader stopped past its
// lease, and killed while a push is under way.

// servingPid is the process that runs controller i's mesh: the child of
// mesh controller (a launcher), or genesis's own process, which runs it
// itself.
func (c *ctlCluster) servingPid(t testing.TB, i int) int {
	t.Helper()
	pid := c.ds[i].cmd.Process.Pid
	// Each thread lists the children it forked.
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		body, err := os.ReadFile(task)
		if err != nil {
			continue // the thread ended
		}
		if kids := strings.Fields(string(body)); len(kids) > 0 {
			child, err := strconv.Atoi(kids[0])
			if err != nil {
				t.Fatal(err)
			}
			return child
		}
	}
	return pid
}

// freeze stops controller i's serving process with SIGSTOP: alive, its
// sockets open, and silent. It returns what lets it run again, which the
// test's end calls too.
func (c *ctlCluster) freeze(t testing.TB, i int) (thaw func()) {
	t.Helper()
	pid := c.servingPid(t, i)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop %s's process %d: %v", c.nodes[i], pid, err)
	}
	var once sync.Once
	thaw = func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("continue %s's process %d: %v", c.nodes[i], pid, err)
			}
		})
	}
	t.Cleanup(thaw)
	return thaw
}

// pushTaken sets note's text on every host and pushes it through
// controller i, waiting 5 s for the hosts, retrying within while no
// controller serves the writes; it returns each host's sequence once the
// leader took the push: a new declaration sent to every host, whether
// the host answered or not.
func (c *ctlCluster) pushTaken(t testing.TB, i int, text string, within time.Duration) map[string]uint64 {
	t.Helper()
	seqs := map[string]uint64{}
	poll.Until(t, within, "a push through "+c.nodes[i]+" taken", func() error {
		c.ds[i].alive(t)
		for _, h := range c.hosts {
			if _, errOut, code := runMesh(t, "assign", "--dir", c.dirs[i], "--set", "text="+text, "note", h.node); code != 0 {
				return fmt.Errorf("assign: exit %d: %s", code, errOut)
			}
		}
		out, errOut, code := runMesh(t, "push", "--dir", c.dirs[i], "--json", "--wait", "5s")
		var o cli.PushOutcome
		if err := json.Unmarshal([]byte(out), &o); err != nil {
			return fmt.Errorf("push: exit %d: %s", code, errOut)
		}
		for _, h := range c.hosts {
			k := slices.IndexFunc(o.Nodes, func(n cli.PushNodeOutcome) bool { return n.Node == h.node })
			if k < 0 || o.Nodes[k].Seq == 0 || o.Nodes[k].Unchanged || o.Nodes[k].Error != "" {
				return fmt.Errorf("push: %s not sent a declaration: exit %d: %+v", h.node, code, o)
			}
			seqs[h.node] = o.Nodes[k].Seq
		}
		return nil
	})
	return seqs
}

// TestControllersStoppedLeaderDoesNotLead: the leader stopped with
// SIGSTOP for twice the lease's time, alive and silent, another
// controller leads and takes a push meanwhile; let run again, the
// stopped controller says it follows the one that leads, pushes through
// it and through another succeed, every host converges and none is sent
// a sequence twice or applies one below another.
func TestControllersStoppedLeaderDoesNotLead(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three controllers, their leader stopped past its lease and let run again")
	c := newControllers(t, 2)
	seqs := c.pushText(t, 0, "one", 60*time.Second)
	c.converged(t, 0, "one", 30*time.Second)

	lead := c.leader(t, 30*time.Second)
	other := (lead + 1) % 3
	stopped := time.Now()
	thaw := c.freeze(t, lead)
	// A host whose bus connection is to the stopped server hears nothing
	// until it runs again: its client takes minutes of unanswered pings
	// (the NATS client's default) to leave a server that is silent yet
	// open. So the push is checked as the new leader took it.
	next := c.pushTaken(t, other, "two", 60*time.Second)
	t.Logf("the leader stopped to a push taken through another: %s", time.Since(stopped).Round(time.Millisecond))
	newer(t, "the push while the leader was stopped", seqs, next)
	// Stopped past twice the lease's time (6 s): the length of the
	// scenario, not a wait for a state.
	time.Sleep(time.Until(stopped.Add(12 * time.Second)))
	thaw()

	woken := c.server(t, lead)
	poll.Until(t, 30*time.Second, c.nodes[lead]+" says it follows", func() error {
		c.ds[lead].alive(t)
		rs, err := c.roles(t, c.dirs[lead], 3)
		if err != nil {
			return err
		}
		r := rs[woken]
		if r.Role == "follower" && r.Leader != "" && r.Leader != woken {
			return nil
		}
		return fmt.Errorf("%+v", rs)
	})
	// Once it followed, a later election may choose it again, as any
	// controller: what it must not do is lead by the lease it held when
	// it was stopped, which the follow above rules out.
	c.leader(t, 30*time.Second)
	c.converged(t, other, "two", 60*time.Second)
	seqs = next
	next = c.pushText(t, lead, "three", 60*time.Second)
	newer(t, "the push through the controller let run again", seqs, next)
	c.converged(t, lead, "three", 60*time.Second)
	seqs = next
	next = c.pushText(t, other, "four", 60*time.Second)
	newer(t, "the push through another after", seqs, next)
	c.converged(t, other, "four", 30*time.Second)
	c.checkSeqs(t)
}

// last is the last sequence seen applied, zero before any.
func (w *seqWatch) last() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seqs) == 0 {
		return 0
	}
	return w.seqs[len(w.seqs)-1]
}

// TestControllersLeaderKilledMidPush: the leader dies as by kill -9 at
// each point of a push through another controller (mesh.CrashFile names
// the point): its declarations numbered, not recorded; recorded, not
// published; published, before the reports. Run again with no flag, a
// leader chosen: what was recorded reaches
// the hosts with no other push (the new leader sends what they have not
// applied), what was not is carried by the next push; no host is sent a
// sequence it applied before or applies one below another, and every
// host converges to the last text pushed.
func TestControllersLeaderKilledMidPush(t *testing.T) {
	t.Parallel()
	optin.NeedSlow(t, "three controllers, their leader killed at each point of a push")
	c := newControllers(t, 2)
	seqs := c.pushText(t, 0, "zero", 60*time.Second)
	c.converged(t, 0, "zero", 30*time.Second)

	for k, point := range []string{mesh.CrashBeforeRecord, mesh.CrashBeforePublish, mesh.CrashBeforeReports} {
		lead := c.leader(t, 60*time.Second)
		other := (lead + 1) % 3
		text := fmt.Sprintf("round%d", k+1)
		for _, h := range c.hosts {
			mustRun(t, "assign", "--dir", c.dirs[lead], "--set", "text="+text, "note", h.node)
		}
		applied := map[string]uint64{}
		for _, h := range c.hosts {
			applied[h.node] = h.seqs.last()
		}
		crash := filepath.Join(c.dirs[lead], "controller", mesh.CrashFile)
		if err := os.WriteFile(crash, []byte(point+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// The push is a process of its own, ended after 10 s: the CLI waits
		// minutes for an answer the dead leader took with it.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		cmd := exec.CommandContext(ctx, meshBin, "push", "--dir", c.dirs[other], "--json", "--wait", "5s")
		cmd.Env = meshEnv
		out, _ := cmd.CombinedOutput()
		cancel()
		poll.Until(t, 30*time.Second, c.nodes[lead]+" died at "+point, func() error {
			_, err := os.Stat(crash)
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("%s is still there: %v", crash, err)
		})
		t.Logf("round %d (%s): the push in flight: %s", k+1, point, strings.Join(strings.Fields(string(out)), " "))
		// Its process ends: genesis's, or the launcher's, which ends with a
		// ready child that died (systemd would start it again).
		c.ds[lead].exited(t, 30*time.Second)
		c.ds[lead] = nil
		c.restart(t, lead)
		if point != mesh.CrashBeforeRecord {
			// Recorded: the hosts get it with no other push.
			c.converged(t, other, text, 60*time.Second)
			for _, h := range c.hosts {
				if got := h.seqs.last(); got <= applied[h.node] {
					t.Errorf("round %d (%s): %s applied %d, not above the %d it held", k+1, point, h.node, got, applied[h.node])
				}
			}
		}
		for _, h := range c.hosts {
			applied[h.node] = h.seqs.last()
		}
		// Another text: a content unchanged is not sent again.
		text += "-again"
		next := c.pushText(t, other, text, 60*time.Second)
		newer(t, fmt.Sprintf("round %d's next push", k+1), seqs, next)
		newer(t, fmt.Sprintf("round %d's next push, after what the hosts applied", k+1), applied, next)
		c.converged(t, other, text, 30*time.Second)
		seqs = next
	}
	c.checkSeqs(t)
}
