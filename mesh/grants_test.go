package mesh

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

const (
	filesManifest = `{"name":"files","version":"1","routes":[{"name":"files","port":2049}],
		"provides":[{"grant":"files","route":"files","file":{"path":"/srv/store/users","line":"${consumer}:${credential}","mode":"0600"}}],"resources":[]}`
	appManifest = `{"name":"app","version":"1","settings":[{"name":"files_user","type":"string"},{"name":"files_password","type":"string","secret":true},
		{"name":"files_address","type":"string"}],"consumes":[{"grant":"files","user":"files_user","password":"files_password","address":"files_address"}],
		"resources":[{"file":{"path":"/etc/app/files","content":"${files_user}:${files_password}@${files_address}"}}]}`
)

// grantMesh is a controller with nodes alpha, beta and gamma (each
// sealing to alphaSealKey) and the modules files (provides grant files)
// and app (consumes it) registered.
func grantMesh(t *testing.T, wrap func(*store.DB) Store) (*Controller, *store.DB) {
	t.Helper()
	c, db := newControllerWith(t, &clock{now: time.Now()}, wrap)
	ctx := context.Background()
	for _, n := range []string{"beta", "gamma"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0." + n[:1], NKey: "U" + n, SealKey: alphaSealKey.Public().String(), Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	var mods []spec.Module
	for _, j := range []string{filesManifest, appManifest} {
		man, err := spec.ParseManifest([]byte(j))
		if err != nil {
			t.Fatal(err)
		}
		m, err := man.Resolve(func(string) (spec.Content, error) { return spec.Content{}, nil })
		if err != nil {
			t.Fatal(err)
		}
		mods = append(mods, m)
	}
	if _, err := c.modules.registerModules(ctx, spec.ModuleRegisterRequest{Modules: mods}); err != nil {
		t.Fatal(err)
	}
	return c, db
}

// grantFile is the content of the file at path in node's plan, opened.
func grantFile(t *testing.T, plan Plan, path string) string {
	t.Helper()
	for _, r := range plan.Resources {
		if f, ok := r.Spec.(*spec.FileSpec); ok && f.Path == path {
			if f.Sealed == "" {
				t.Fatalf("%s is not sealed", path)
			}
			b, err := alphaSealKey.Open(f.Sealed)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	return "(no file)"
}

func mustAssign(t *testing.T, c *Controller, req spec.AssignRequest) spec.AssignResult {
	t.Helper()
	res, err := c.modules.assign(context.Background(), req)
	if err != nil {
		t.Fatalf("assign %s to %s: %v", req.Module, req.Node, err)
	}
	return res
}

func gatherPlans(t *testing.T, c *Controller) map[string]Plan {
	t.Helper()
	g, err := c.composer.gather(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return g.plans
}

func credentials(t *testing.T, c *Controller) map[string]string {
	t.Helper()
	gs, err := c.modules.db.Grants(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range gs {
		out[g.Module+"-"+g.Node] = g.Credential
	}
	return out
}

// TestGrantMintAndFill: assigning a consumer mints its credential; the
// consumer's filled settings carry its name, the credential and the
// provider's address; the provider's file has one line per consumer, in
// name order; assigning again keeps the credential; unassigning a
// consumer removes its line at the next gather.
func TestGrantMintAndFill(t *testing.T) {
	t.Parallel()
	c, _ := grantMesh(t, nil)
	ctx := context.Background()
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "app", Node: "beta"}); err == nil || !strings.Contains(err.Error(), `no node provides grant "files"`) {
		t.Fatalf("a consumer with no provider: %v, want refused naming the grant", err)
	}
	mustAssign(t, c, spec.AssignRequest{Module: "files", Node: "alpha"})
	res := mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "gamma"})
	if fmt.Sprint(res.Changed) != "[alpha gamma]" {
		t.Errorf("assigning a consumer changes %v, want the provider's node and its own", res.Changed)
	}
	mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "beta"})
	creds := credentials(t, c)
	if len(creds["app-beta"]) != 43 || creds["app-beta"] == creds["app-gamma"] {
		t.Fatalf("credentials %v: want 32 bytes base64url each, distinct", creds)
	}
	plans := gatherPlans(t, c)
	want := "app-beta:" + creds["app-beta"] + "\napp-gamma:" + creds["app-gamma"] + "\n"
	if got := grantFile(t, plans["alpha"], "/srv/store/users"); got != want {
		t.Errorf("the provider's file reads %q, want %q", got, want)
	}
	if got, want := grantFile(t, plans["beta"], "/etc/app/files"), "app-beta:"+creds["app-beta"]+"@files.alpha.internal:2049"; got != want {
		t.Errorf("the consumer's file reads %q, want %q", got, want)
	}
	mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "beta"})
	if got := credentials(t, c)["app-beta"]; got != creds["app-beta"] {
		t.Error("assigning again changed the credential")
	}
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "app", Node: "beta", Settings: map[string]string{"files_user": "me"}}); err == nil ||
		!strings.Contains(err.Error(), `setting "files_user"`) || !strings.Contains(err.Error(), "filled by the controller") {
		t.Errorf("--set of a filled setting: %v, want refused naming it", err)
	}
	if _, err := c.modules.unassign(ctx, spec.AssignRequest{Module: "app", Node: "gamma"}); err != nil {
		t.Fatal(err)
	}
	if got, want := grantFile(t, gatherPlans(t, c)["alpha"], "/srv/store/users"), "app-beta:"+creds["app-beta"]+"\n"; got != want {
		t.Errorf("after unassigning gamma's consumer the provider's file reads %q, want %q", got, want)
	}
}

// TestGrantProviderChoice: two nodes providing a grant and no --grant is
// refused naming both; --grant names one; unassigning a provider that has
// consumers is refused naming them, and allowed with --force, the
// consumer keeping its credential.
func TestGrantProviderChoice(t *testing.T) {
	t.Parallel()
	c, _ := grantMesh(t, nil)
	ctx := context.Background()
	mustAssign(t, c, spec.AssignRequest{Module: "files", Node: "alpha"})
	mustAssign(t, c, spec.AssignRequest{Module: "files", Node: "beta"})
	_, err := c.modules.assign(ctx, spec.AssignRequest{Module: "app", Node: "gamma"})
	if err == nil || !strings.Contains(err.Error(), "alpha and beta") || !strings.Contains(err.Error(), "--grant files=NODE") {
		t.Fatalf("two providers and no --grant: %v, want refused naming both", err)
	}
	mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "gamma", Grants: map[string]string{"files": "beta"}})
	cred := credentials(t, c)["app-gamma"]
	plans := gatherPlans(t, c)
	if got := grantFile(t, plans["beta"], "/srv/store/users"); got != "app-gamma:"+cred+"\n" {
		t.Errorf("beta's file reads %q", got)
	}
	if got := grantFile(t, plans["alpha"], "/srv/store/users"); got != "" {
		t.Errorf("alpha's file reads %q, want no line", got)
	}
	_, err = c.modules.unassign(ctx, spec.AssignRequest{Module: "files", Node: "beta"})
	if err == nil || !strings.Contains(err.Error(), "app-gamma") {
		t.Fatalf("unassigning a provider with a consumer: %v, want refused naming it", err)
	}
	if _, err := c.modules.unassign(ctx, spec.AssignRequest{Module: "files", Node: "beta", Force: true}); err != nil {
		t.Fatal(err)
	}
	if got := credentials(t, c)["app-gamma"]; got != cred {
		t.Error("the orphaned consumer lost its credential")
	}
	list, err := c.modules.listGrants(ctx, spec.GrantListRequest{})
	if err != nil || len(list.Grants) != 1 || !list.Grants[0].Orphaned {
		t.Errorf("grant list %+v %v, want gamma's grant orphaned", list, err)
	}
	st, err := c.status(ctx, spec.StatusRequest{})
	if err != nil || st.AllClear || !slices.ContainsFunc(st.Problems, func(p string) bool {
		return strings.HasPrefix(p, "app-gamma holds grant files of node beta") && strings.Contains(p, "orphaned")
	}) {
		t.Errorf("status %v, %v: want it to name app-gamma orphaned, and no all-clear", st.Problems, err)
	}
}

// TestGrantRotate: rotating mints a new credential that one gather
// carries to both the consumer and the provider.
func TestGrantRotate(t *testing.T) {
	t.Parallel()
	c, _ := grantMesh(t, nil)
	ctx := context.Background()
	mustAssign(t, c, spec.AssignRequest{Module: "files", Node: "alpha"})
	mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "beta"})
	old := credentials(t, c)["app-beta"]
	res, err := c.modules.rotateGrants(ctx, spec.GrantRotateRequest{Module: "app", Node: "beta"})
	if err != nil || fmt.Sprint(res.Changed) != "[alpha beta]" {
		t.Fatalf("rotate: %+v %v", res, err)
	}
	cred := credentials(t, c)["app-beta"]
	if cred == old {
		t.Fatal("rotating kept the credential")
	}
	plans := gatherPlans(t, c)
	if got := grantFile(t, plans["alpha"], "/srv/store/users"); got != "app-beta:"+cred+"\n" {
		t.Errorf("the provider's file reads %q after rotating", got)
	}
	if got := grantFile(t, plans["beta"], "/etc/app/files"); !strings.Contains(got, cred) {
		t.Errorf("the consumer's file reads %q after rotating", got)
	}
	if _, err := c.modules.rotateGrants(ctx, spec.GrantRotateRequest{Module: "app", Node: "gamma"}); err == nil {
		t.Error("rotating a consumer that holds no grant succeeded")
	}
}

// TestGrantCredentialSealedAtRest: the credential is in neither mesh.db
// nor its write-ahead log, plain.
func TestGrantCredentialSealedAtRest(t *testing.T) {
	t.Parallel()
	c, _ := grantMesh(t, nil)
	mustAssign(t, c, spec.AssignRequest{Module: "files", Node: "alpha"})
	mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "beta"})
	cred := credentials(t, c)["app-beta"]
	dir, _ := controllerDirs.Load(c)
	path := filepath.Join(dir.(string), DBFile)
	var all []byte
	for _, p := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if !bytes.Contains(all, []byte("app")) || !bytes.Contains(all, []byte("files")) {
		t.Fatal("the files read hold neither module: the test reads the wrong files")
	}
	if bytes.Contains(all, []byte(cred)) {
		t.Error("mesh.db holds the credential in plain")
	}
}

// grantFailingStore fails the read of the grants on demand.
type grantFailingStore struct {
	*store.DB
	fail atomic.Bool
}

func (f *grantFailingStore) Grants(ctx context.Context) ([]store.Grant, error) {
	if f.fail.Load() {
		return nil, fmt.Errorf("read grants: %w", errUnreachable)
	}
	return f.DB.Grants(ctx)
}

// TestGrantReadFailureFailsThePush holds invariant 1 for grants: a read
// of the grants that fails fails the push, naming it, and sends nothing.
func TestGrantReadFailureFailsThePush(t *testing.T) {
	t.Parallel()
	var fs *grantFailingStore
	c, db := grantMesh(t, func(db *store.DB) Store {
		fs = &grantFailingStore{DB: db}
		return fs
	})
	ctx := context.Background()
	mustAssign(t, c, spec.AssignRequest{Module: "files", Node: "alpha"})
	mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "beta"})
	fs.fail.Store(true)
	_, err := c.push(ctx, spec.PushRequest{})
	if err == nil || !strings.Contains(err.Error(), "read grants") {
		t.Fatalf("push with the grants unreadable: %v, want it failed naming the read", err)
	}
	for _, n := range []string{"alpha", "beta", "gamma"} {
		if d, err := db.LastDeclaration(ctx, n); err == nil {
			t.Errorf("%s was sent declaration %d during a failed push", n, d.Seq)
		}
	}
}
