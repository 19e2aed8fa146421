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
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// holdStore holds the store of the mesh kept in dir in an exclusive
// transaction, as `sqlite3 mesh.db 'BEGIN EXCLUSIVE;'` does, until the
// function it returns is called (or the test ends): the controller reads
// on, and every write it makes waits its busy timeout and fails.
func holdStore(t *testing.T, dir string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", store.DSN(filepath.Join(dir, "controller", "mesh.db")))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), `BEGIN EXCLUSIVE`); err != nil {
		conn.Close()
		db.Close()
		t.Fatalf("hold the store: %v", err)
	}
	held := true
	release = func() {
		if !held {
			return
		}
		held = false
		if _, err := conn.ExecContext(context.Background(), `ROLLBACK`); err != nil {
			t.Errorf("release the store: %v", err)
		}
		conn.Close()
		db.Close()
	}
	t.Cleanup(release)
	return release
}

// failCSRFromOutside has node's host, stopped, fail its declaration's
// certificate for a cause outside the node, then lets the cause go: the
// declaration is pushed while the host is down (the push has no report),
// the controller's store is held, the host is started (start), and its
// certificate request reaches a controller that cannot record the
// certificate it signs, so answers that it failed. Once the controller
// has said so, the store is released. It returns the declaration's
// sequence.
func failCSRFromOutside(t *testing.T, m *testMesh, node string, start func() *daemon) uint64 {
	t.Helper()
	out, errOut, code := runMesh(t, "push", "--dir", m.dir, "--json", "--wait", "1s", node)
	if code == 0 {
		t.Fatalf("a push to %s, whose host is down, exited 0:\n%s", node, out)
	}
	var o struct {
		Nodes []struct {
			Node string `json:"node"`
			Seq  uint64 `json:"seq"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &o); err != nil || len(o.Nodes) != 1 || o.Nodes[0].Seq == 0 {
		t.Fatalf("the push to %s (down): %v\nstdout %s\nstderr %s", node, err, out, errOut)
	}
	seq := o.Nodes[0].Seq

	release := holdStore(t, m.dir)
	logged := len(m.d.out.String())
	start()
	var line string
	poll.Until(t, 60*time.Second, "the controller failed "+node+"'s certificate request, its store held", func() error {
		line = lineWith(m.d.out.String()[logged:], `msg="certificate request failed"`, " node="+node+" ")
		if line != "" {
			return nil
		}
		return errors.New("not logged yet")
	})
	if !strings.Contains(line, "SQLITE_BUSY") {
		t.Errorf("the certificate request failed for another cause than the store held: %s", line)
	}
	release()
	return seq
}

// lineWith is the first line of text holding every one of words.
func lineWith(text string, words ...string) string {
	for _, line := range strings.Split(text, "\n") {
		if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(line, w) }) {
			return line
		}
	}
	return ""
}

// healed waits until node's last report is of declaration seq, every
// resource in place (results must hold want), and status is all clear;
// the controller sent node no declaration after seq.
func healed(t *testing.T, dir, node string, seq uint64, want map[string]string) {
	t.Helper()
	poll.Until(t, 90*time.Second, node+" applied its declaration again by itself", func() error {
		n := nodeShow(t, dir, node)
		r := n.LastReport
		if r == nil || r.Seq != seq {
			return fmt.Errorf("last report %+v", r)
		}
		for _, res := range r.Results {
			if res.Outcome == spec.Failed {
				return fmt.Errorf("declaration %d: %s failed: %s", r.Seq, res.Name, res.Error)
			}
		}
		st, clear := statusOf(t, dir)
		if clear {
			return nil
		}
		return fmt.Errorf("status %+v", st)
	})
	n := nodeShow(t, dir, node)
	got := map[string]string{}
	for _, res := range n.LastReport.Results {
		got[res.Name] = res.Outcome
	}
	for name, outcome := range want {
		if got[name] != outcome {
			t.Errorf("%s's last report: %s %q, want %q (all: %v)", node, name, got[name], outcome, got)
		}
	}
	if n.SentSeq != seq {
		t.Errorf("%s was sent declaration %d, want %d still: nothing pushed", node, n.SentSeq, seq)
	}
}

// TestCertificateFailedFromOutsideHeals: a certificate whose request the
// controller failed to carry out (its store held by another process, so
// the certificate it signed could not be recorded) is a failure from
// outside the node: once the store is free, the host applies its kept
// declaration again by itself, with no push and its reconcile minutes
// away, and mesh status clears.
func TestCertificateFailedFromOutsideHeals(t *testing.T) {
	optin.NeedSlow(t, "waits out the controller's writes on its held store, some 20 s")
	t.Parallel()
	m := newMesh(t)
	rootB := t.TempDir()
	betaDir, beta := m.join(t, "beta", "--root", rootB)
	mustRun(t, "module", "register", "--dir", m.dir, certModule(t))
	mustRun(t, "assign", "--dir", m.dir, "tls", "beta")
	beta.stop(t)

	seq := failCSRFromOutside(t, m, "beta", func() *daemon {
		return start(t, "host", "--dir", betaDir, "--root", rootB, "--heartbeat", "500ms", "--dns", port(t), "--dns-upstream", deadUpstream)
	})
	healed(t, m.dir, "beta", seq, map[string]string{certResource: spec.Created})
	checkCertDir(t, filepath.Join(rootB, certPath), "web.beta.internal")
}

// TestCertificateFailedFromOutsideHealsItsContainer: the same with the web
// example, whose container mounts the certificate's directory: it fails
// with the certificate (its bind source is not there), and comes up when
// the host applies the declaration again by itself.
func TestCertificateFailedFromOutsideHealsItsContainer(t *testing.T) {
	optin.NeedSlow(t, "waits out the controller's writes on its held store, some 30 s")
	t.Parallel()
	m := newContainerMesh(t)
	mustRun(t, "module", "register", "--dir", m.dir, m.webDir)
	mustRun(t, "assign", "--dir", m.dir, "web", m.b)
	m.beta.stop(t)

	seq := failCSRFromOutside(t, m.testMesh, m.b, func() *daemon {
		m.beta = start(t, "host", "--dir", m.betaDir, "--root", m.rootB, "--subnet", m.subnetB.String(), "--heartbeat", "500ms",
			"--dns", port(t), "--dns-upstream", deadUpstream)
		return m.beta
	})
	healed(t, m.dir, m.b, seq, map[string]string{"web:certificate:/srv/web-tls": spec.Created, "web:container:web": spec.Created})
	if line := lineWith(m.beta.out.String(), `msg="resource failed"`, "resource=web:container:web"); line == "" {
		t.Errorf("%s's host does not say the container failed with the certificate:\n%s", m.b, m.beta.out.String())
	} else {
		t.Logf("before the heal: %s", line)
	}
	checkCertDir(t, filepath.Join(m.rootB, "srv/web-tls"), "web."+m.b+".internal")
	if c, ok := m.container(t, m.b, "web"); !ok || !c.Container.State.Running {
		t.Errorf("%s's web container is not running after the heal: %+v", m.b, c.Container.State)
	}
	if _, err := os.Stat(filepath.Join(m.rootB, "srv/web/index.html")); err != nil {
		t.Error(err)
	}
}
