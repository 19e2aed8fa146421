package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/moby/moby/client"
)

// TestGrantExamplesOnTwoHosts: the authweb example (busybox httpd with
// basic authentication from its grant's file) on alpha and the authclient
// example on alpha and beta. Each client fetches the page with its own
// credential; a request with none, or with another's password, is
// refused 401. Unassigned, beta's credential is refused while alpha's
// still serves; rotated, alpha's old credential is refused and its new
// one, which the replaced client fetches with, serves. No credential is
// in a client's docker top, nor in a command line or environment of its
// processes.
func TestGrantExamplesOnTwoHosts(t *testing.T) {
	t.Parallel()
	m := newContainerMesh(t)
	mustRun(t, "module", "register", "--dir", m.dir, exampleModule(t, m.cli, "authweb"), exampleModule(t, m.cli, "authclient"))
	mustRun(t, "assign", "--dir", m.dir, "authweb", m.a)
	mustRun(t, "assign", "--dir", m.dir, "authclient", m.a)
	mustRun(t, "assign", "--dir", m.dir, "authclient", m.b)
	push(t, m.dir)

	page := "for the holders of pages on " + m.a + "\n"
	userA, userB := "authclient-"+m.a, "authclient-"+m.b
	fetched := func(root string, since time.Time) {
		t.Helper()
		status := filepath.Join(root, "srv/authclient/status")
		poll.Until(t, 60*time.Second, "the client in "+root+" fetched the page with its credential", func() error {
			b, err := os.ReadFile(status)
			info, serr := os.Stat(status)
			body, _ := os.ReadFile(filepath.Join(root, "srv/authclient/page"))
			if err == nil && serr == nil && string(b) == "200\n" && info.ModTime().After(since) && string(body) == page {
				return nil
			}
			return fmt.Errorf("status %q %v, page %q", b, err, body)
		})
	}
	start := time.Now()
	fetched(m.rootA, start)
	fetched(m.rootB, start)

	creds := m.grantedUsers(t)
	credA, credB := creds[userA], creds[userB]
	if credA == "" || credB == "" || credA == credB || len(creds) != 2 {
		t.Fatalf("the provider's file holds %v, want a credential each for %s and %s", creds, userA, userB)
	}
	for _, c := range []struct {
		user, password string
		want           int
	}{
		{"", "", http.StatusUnauthorized},
		{userB, credA, http.StatusUnauthorized},
		{userA, credB, http.StatusUnauthorized},
		{userA, credA, http.StatusOK},
		{userB, credB, http.StatusOK},
	} {
		if got := m.fetchPage(t, c.user, c.password); got != c.want {
			t.Errorf("GET as %q with %s's password: %d, want %d", c.user, map[string]string{credA: userA, credB: userB, "": "no one"}[c.password], got, c.want)
		}
	}

	// The credentials are only where declared: in the provider's file
	// and the clients' secret files (on the tmpfs under host/run), not in
	// docker inspect of a client, nor, plain or base64, in the
	// controller's store, stream or any host's state, a daemon's output
	// or the audit.
	for _, node := range []string{m.a, m.b} {
		res, ok := m.container(t, node, "authclient")
		if !ok {
			t.Fatalf("no client on %s", node)
		}
		if b, err := json.Marshal(res); err != nil || bytes.Contains(b, []byte(credA)) || bytes.Contains(b, []byte(credB)) {
			t.Errorf("docker inspect of %s's client holds a credential (%v)", node, err)
		}
	}
	m.credentialsOnlyWhereDeclared(t, credA, credB)
	m.clientArgvHoldsNoCredential(t, m.a, credA, credB)
	m.clientArgvHoldsNoCredential(t, m.b, credA, credB)

	// Unassigned, beta's line leaves the provider's file, and its
	// credential is refused once the provider has reloaded.
	mustRun(t, "unassign", "--dir", m.dir, "authclient", m.b)
	push(t, m.dir)
	m.pageAnswers(t, userB, credB, http.StatusUnauthorized)
	m.pageAnswers(t, userA, credA, http.StatusOK)
	if _, ok := m.container(t, m.b, "authclient"); ok {
		t.Error("the unassigned client's container is still there")
	}

	// Rotated, the old credential is refused and the new one serves: the
	// client, its secret changed, is replaced and fetches with it.
	clientID := m.id(t, m.a, "authclient")
	mustRun(t, "grant", "rotate", "--dir", m.dir, "authclient", m.a)
	rotated := time.Now()
	push(t, m.dir)
	creds = m.grantedUsers(t)
	newA := creds[userA]
	if newA == "" || newA == credA || len(creds) != 1 {
		t.Fatalf("after rotation the provider's file holds %v, want one new credential for %s", creds, userA)
	}
	m.pageAnswers(t, userA, credA, http.StatusUnauthorized)
	m.pageAnswers(t, userA, newA, http.StatusOK)
	if m.id(t, m.a, "authclient") == clientID {
		t.Error("a rotated credential kept the client's container")
	}
	fetched(m.rootA, rotated)
	m.credentialsOnlyWhereDeclared(t, credA, credB, newA)
	m.clientArgvHoldsNoCredential(t, m.a, credA, credB, newA)
}

// clientArgvHoldsNoCredential fails the test where a process of node's
// authclient container shows a credential, plain or base64, to anyone
// who can list processes: in a row of docker top, or in the command line
// or environment /proc gives of one of its processes. The fetch's
// processes live for milliseconds, so the container's processes are
// sampled from its cgroup (a read a sample) until one sample has caught a
// fetch in flight, nc running; docker top is asked once each round.
func (m *containerMesh) clientArgvHoldsNoCredential(t *testing.T, node string, creds ...string) {
	t.Helper()
	var forms [][]byte
	for _, c := range creds {
		forms = append(forms, encodedForms(c)...)
	}
	res, ok := m.container(t, node, "authclient")
	if !ok || res.Container.State == nil || res.Container.State.Pid == 0 {
		t.Fatalf("no running client on %s", node)
	}
	procs := cgroupProcs(t, res.Container.State.Pid)
	seen := map[string]bool{}
	poll.Until(t, 60*time.Second, "a fetch of "+node+"'s client caught in flight", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		top, err := m.cli.ContainerTop(ctx, res.Container.ID, client.ContainerTopOptions{})
		if err != nil {
			return fmt.Errorf("docker top: %w", err)
		}
		pidAt := slices.Index(top.Titles, "PID")
		for _, row := range top.Processes {
			if holdsAny([]byte(strings.Join(row, " ")), forms) {
				pid := "?"
				if pidAt >= 0 && pidAt < len(row) {
					pid = row[pidAt]
				}
				t.Fatalf("docker top of %s's client shows a credential in the line of process %s", node, pid)
			}
		}
		tick := time.NewTicker(500 * time.Microsecond)
		defer tick.Stop()
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); <-tick.C {
			b, err := os.ReadFile(procs)
			if err != nil {
				return fmt.Errorf("the client's processes: %w", err)
			}
			for _, pid := range strings.Fields(string(b)) {
				cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
				environ, eerr := os.ReadFile("/proc/" + pid + "/environ")
				if err != nil || eerr != nil || len(cmdline) == 0 {
					continue // gone between the list and the read
				}
				name := filepath.Base(string(bytes.SplitN(cmdline, []byte{0}, 2)[0]))
				if holdsAny(cmdline, forms) {
					t.Fatalf("process %s (%s) of %s's client holds a credential in its command line", pid, name, node)
				}
				if holdsAny(environ, forms) {
					t.Fatalf("process %s (%s) of %s's client holds a credential in its environment", pid, name, node)
				}
				seen[name] = true
				if name == "nc" {
					return nil
				}
			}
		}
		return fmt.Errorf("no nc among the processes seen: %v", slices.Sorted(maps.Keys(seen)))
	})
}

// cgroupProcs is the cgroup.procs file that lists the processes of pid's
// cgroup: the unified hierarchy's, or a v1 controller's.
func cgroupProcs(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		dir := "/sys/fs/cgroup"
		if f[1] != "" {
			dir = filepath.Join(dir, strings.TrimPrefix(f[1], "name="))
		}
		p := filepath.Join(dir, f[2], "cgroup.procs")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("no cgroup.procs for process %d in %q", pid, b)
	return ""
}

// credentialsOnlyWhereDeclared fails the test where a credential is found,
// plain or base64 (encodedForms), outside its declared destinations: in
// a file of the controller's directory (its store, write-ahead log,
// JetStream files, snapshots; alpha's state under host/) or of beta's
// state directory, save a client's secret file on the tmpfs under
// host/run/secrets; in either daemon's output; in the audit.
func (m *containerMesh) credentialsOnlyWhereDeclared(t *testing.T, creds ...string) {
	t.Helper()
	var forms [][]byte
	for _, c := range creds {
		forms = append(forms, encodedForms(c)...)
	}
	seen := 0 // files read, so that a walk of nothing fails
	for _, dir := range []string{m.dir, m.betaDir} {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() {
				return nil
			}
			if strings.Contains(p, "/host/run/secrets/") {
				return nil // a client's secret file, on the tmpfs it is declared to
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			seen++
			if holdsAny(b, forms) {
				t.Errorf("%s holds a credential", p)
			}
			return nil
		})
	}
	for _, f := range []string{"controller/mesh.db", "controller/js"} {
		if _, err := os.Stat(filepath.Join(m.dir, f)); err != nil {
			t.Errorf("the controller's %s: %v: the search reads the wrong directory", f, err)
		}
	}
	if seen == 0 {
		t.Error("no file read in the controller's and beta's directories")
	}
	audit, _, code := runMesh(t, "audit", "--dir", m.dir, "--json")
	if code != 0 || !strings.Contains(audit, "authclient") {
		t.Errorf("mesh audit --json: exit %d, authclient's assignment not in it:\n%s", code, audit)
	}
	for what, out := range map[string]string{"the controller's output": m.d.out.String(), "beta's output": m.beta.out.String(), "the audit": audit} {
		if holdsAny([]byte(out), forms) {
			t.Errorf("%s holds a credential", what)
		}
	}
}

// grantedUsers is the credential of each consumer in the file alpha's
// authweb provides grant pages through, by consumer.
func (m *containerMesh) grantedUsers(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.rootA, "srv/authweb/auth/users"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		f := strings.Split(line, ":")
		if len(f) != 3 || f[0] != "/" {
			t.Fatalf("the provider's file holds %q, want /:USER:PASSWORD lines", b)
		}
		out[f[1]] = f[2]
	}
	return out
}

// fetchPage is the status of a GET of alpha's authweb page, from the
// machine, as user with password (none when user is empty).
func (m *containerMesh) fetchPage(t *testing.T, user, password string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+m.addrA+":8080/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Do(req)
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// pageAnswers waits until a GET of alpha's page as user with password
// answers want.
func (m *containerMesh) pageAnswers(t *testing.T, user, password string, want int) {
	t.Helper()
	poll.Until(t, 30*time.Second, fmt.Sprintf("GET as %s answers %d", user, want), func() error {
		got := m.fetchPage(t, user, password)
		if got == want {
			return nil
		}
		return fmt.Errorf("%d", got)
	})
}
