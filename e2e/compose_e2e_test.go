package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// keptRoster is the roster a host holds, as bytes: the names of the roster
// message it kept, or else the roster in its kept declaration.
func keptRoster(t *testing.T, hostDir string) string {
	t.Helper()
	st, _, err := host.ReadState(filepath.Join(hostDir, "host"))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Roster) > 0 {
		var doc struct {
			Names json.RawMessage `json:"names"`
		}
		json.Unmarshal(st.Roster, &doc)
		return string(doc.Names)
	}
	var d struct {
		Roster json.RawMessage `json:"roster"`
	}
	json.Unmarshal(st.Declaration, &d)
	return string(d.Roster)
}

func TestSettingsRoutesAndALockedStore(t *testing.T) {
	t.Parallel()
	rootA, rootB := t.TempDir(), t.TempDir()
	// A store write waits 250 ms for a lock, not 5 s: the push against a
	// locked store below fails as it would, sooner.
	m := newMesh(t, "--root", rootA, "--store-busy-timeout", "250ms")
	betaDir, _ := m.join(t, "beta", "--root", rootB)

	mustRun(t, "module", "register", "--dir", m.dir, example("hello"))
	// A required setting left out, a setting the module does not declare:
	// refused, naming it, as a call made wrongly (exit 2); nothing assigned.
	if _, errOut, code := runMesh(t, "assign", "--dir", m.dir, "hello", "alpha"); code != 2 || !strings.Contains(errOut, `required setting "token" has no value`) {
		t.Fatalf("assign without the required setting: exit %d %s", code, errOut)
	}
	if _, errOut, code := runMesh(t, "assign", "--dir", m.dir, "--set", "token=x", "--set", "colour=blue", "hello", "alpha"); code != 2 || !strings.Contains(errOut, `declares no setting "colour"`) {
		t.Fatalf("assign with an undeclared setting: exit %d %s", code, errOut)
	}
	const secretA, secretB = "s3cret-for-alpha", "s3cret-for-beta"
	mustRun(t, "assign", "--dir", m.dir, "--set", "token="+secretA, "--set", "greeting=Hi, there", "hello", "alpha")
	mustRun(t, "assign", "--dir", m.dir, "--set", "token="+secretB, "--set", "domain=beta.example.net", "hello", "beta")
	if o, code := pushJSON(t, m.dir); code != 0 {
		t.Fatalf("push: %+v", o)
	}

	// Settings filled in; the secret reaches its node, and only its node.
	page, _ := os.ReadFile(filepath.Join(rootA, "srv/hello/index.html"))
	if string(page) != "<h1>Hi, there from alpha</h1>\n<p>hello 1.0.0</p>\n" {
		t.Errorf("alpha's page: %q", page)
	}
	if tok, _ := os.ReadFile(filepath.Join(rootB, "srv/hello/token")); string(tok) != secretB {
		t.Errorf("beta's token: %q", tok)
	}
	stateA, _ := os.ReadFile(filepath.Join(m.dir, "host", "state.json"))
	if strings.Contains(string(stateA), base64Of(secretB)) || strings.Contains(string(stateA), secretB) {
		t.Error("beta's secret reached alpha")
	}
	for _, args := range [][]string{{"module", "show", "hello"}, {"module", "show", "--json", "hello"}, {"node", "show", "alpha"}, {"node", "list", "--json"}} {
		out := mustRun(t, append(append([]string{}, args[0], args[1], "--dir", m.dir), args[2:]...)...)
		if strings.Contains(out, secretA) || strings.Contains(out, secretB) {
			t.Errorf("mesh %s shows a secret:\n%s", strings.Join(args, " "), out)
		}
	}
	if strings.Contains(m.d.out.String(), secretA) || strings.Contains(m.d.out.String(), secretB) {
		t.Error("a secret reached the controller's log")
	}

	// The audit records the assignments and the push, never a secret's value.
	audit := mustRun(t, "audit", "--dir", m.dir, "--json")
	var entries []spec.AuditEntry
	if err := json.Unmarshal([]byte(audit), &entries); err != nil {
		t.Fatal(err)
	}
	verbs := map[string]int{}
	for _, e := range entries {
		verbs[e.Verb]++
		if e.Verb == spec.Assign.Name && e.Outcome == "ok" && !strings.Contains(e.Args, `"token":"(secret)"`) {
			t.Errorf("an assignment's audit entry does not redact the token: %s", e.Args)
		}
	}
	if verbs[spec.Assign.Name] != 4 || verbs[spec.Push.Name] != 1 || verbs[spec.ModuleRegister.Name] != 1 {
		t.Errorf("audited verbs %v, want 4 assign (2 refused), 1 push, 1 module.register", verbs)
	}
	if strings.Contains(audit, secretA) || strings.Contains(audit, secretB) {
		t.Error("the audit holds a secret's value")
	}

	// Every host holds every route of the mesh (the roster message comes
	// before the declaration that names it: held when the push reports).
	wantRoutes := []string{"hello.alpha.internal", "hello.beta.example.net", "hello.beta.internal", "hello.example.org"}
	for _, dir := range []string{m.dir, betaDir} {
		var roster spec.Roster
		json.Unmarshal([]byte(keptRoster(t, dir)), &roster)
		var names []string
		for _, r := range roster.Routes {
			names = append(names, r.Name)
		}
		if strings.Join(names, ",") != strings.Join(wantRoutes, ",") || len(roster.Nodes) != 2 {
			t.Errorf("%s's roster: routes %v, %d nodes", dir, names, len(roster.Nodes))
		}
	}

	// The store held under a write lock by another process: the push fails
	// for every node, naming the write it could not make (the store is
	// busy, so the sends not yet begun are not tried), lists no node as
	// sent, and every host's roster is byte for byte what it was.
	rosterA, rosterB := keptRoster(t, m.dir), keptRoster(t, betaDir)
	mustRun(t, "assign", "--dir", m.dir, "--set", "token="+secretB, "--set", "domain=moved.example.net", "hello", "beta")
	release := lockStore(t, filepath.Join(m.dir, "controller", "mesh.db"))
	out, errOut, code := runMesh(t, "push", "--dir", m.dir, "--wait", "5s")
	release()
	if code != 1 || !strings.Contains(out, `not sent: the roster was not sent (record roster`) || !strings.Contains(out, "database is locked") ||
		strings.Count(out, ": not sent: ") != 2 || strings.Contains(out, "sent declaration") || !strings.Contains(errOut, "did not complete everywhere") {
		t.Fatalf("push against a locked store: exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if keptRoster(t, m.dir) != rosterA || keptRoster(t, betaDir) != rosterB {
		t.Fatal("a host's roster changed during a failed push")
	}
	// Released, the next push carries the change.
	if o, code := pushJSON(t, m.dir); code != 0 {
		t.Fatalf("push after the lock: %+v", o)
	}
	poll.Until(t, 10*time.Second, "alpha's roster carries beta's new public name", func() error {
		r := keptRoster(t, m.dir)
		if strings.Contains(r, "hello.moved.example.net") {
			return nil
		}
		return errors.New(r)
	})
}

func base64Of(s string) string {
	b, _ := json.Marshal([]byte(s))
	return strings.Trim(string(b), `"`)
}

// lockStore holds the SQLite file's write lock from this process (a write
// transaction left open), so the controller's writes wait out their busy
// timeout and fail. In WAL mode readers are never blocked, so a read cannot
// be made to fail this way; the store seam test in mesh/ covers reads. It
// returns the release.
func lockStore(t *testing.T, path string) func() {
	t.Helper()
	db, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "UPDATE mesh SET name = name"); err != nil {
		t.Fatal(err)
	}
	return func() {
		conn.ExecContext(ctx, "ROLLBACK")
		conn.Close()
		db.Close()
	}
}
