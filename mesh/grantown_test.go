package mesh

import (
	"context"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// registerManifest registers the module the manifest j describes.
func registerManifest(t *testing.T, c *Controller, j string) {
	t.Helper()
	man, err := spec.ParseManifest([]byte(j))
	if err != nil {
		t.Fatal(err)
	}
	m, err := man.Resolve(func(string) (spec.Content, error) { return spec.Content{}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.modules.registerModules(context.Background(), spec.ModuleRegisterRequest{Modules: []spec.Module{m}}); err != nil {
		t.Fatal(err)
	}
}

// sentFile is the content of the file at path in the last declaration
// sent to node, opened, and that declaration's sequence.
func sentFile(t *testing.T, c *Controller, node, path string) (string, uint64) {
	t.Helper()
	last, err := c.modules.db.LastDeclaration(context.Background(), node)
	if err != nil {
		t.Fatalf("%s's last declaration: %v", node, err)
	}
	var d spec.Declaration
	if err := spec.Decode(last.Body, &d); err != nil {
		t.Fatal(err)
	}
	return grantFile(t, Plan{Resources: d.Resources}, path), last.Seq
}

// pushNode pushes every node and returns node's line of the result.
func pushNode(t *testing.T, c *Controller, node string) spec.PushNode {
	t.Helper()
	res, err := c.push(context.Background(), spec.PushRequest{})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	for _, pn := range res.Nodes {
		if pn.Node == node {
			return pn
		}
	}
	t.Fatalf("push %+v has no line for %s", res.Nodes, node)
	return spec.PushNode{}
}

// TestGrantNodeOwnFailureKeepsWhatItLastReceived holds invariant 1 for
// the two failures of grants that are a node's own: a module that
// consumes a grant its node holds no credential for, and a grant no
// registered module provides any more. The push names the node and why,
// and sends it nothing: it keeps the declaration it last received, with
// its credential, and the provider keeps every consumer's line.
func TestGrantNodeOwnFailureKeepsWhatItLastReceived(t *testing.T) {
	t.Parallel()
	c, _ := grantMesh(t, nil)
	mustAssign(t, c, spec.AssignRequest{Module: "files", Node: "alpha"})
	mustAssign(t, c, spec.AssignRequest{Module: "app", Node: "beta"})
	registerManifest(t, c, `{"name":"reader","version":"1","resources":[{"file":{"path":"/etc/reader","content":"none"}}]}`)
	mustAssign(t, c, spec.AssignRequest{Module: "reader", Node: "gamma"})
	cred := credentials(t, c)["app-beta"]
	for _, n := range []string{"alpha", "beta", "gamma"} {
		if pn := pushNode(t, c, n); pn.Error != "" {
			t.Fatalf("first push to %s: %s", n, pn.Error)
		}
	}
	line := "app-beta:" + cred + "\n"
	consumed := "app-beta:" + cred + "@files.alpha.internal:2049"
	provided, alphaSeq := sentFile(t, c, "alpha", "/srv/store/users")
	held, betaSeq := sentFile(t, c, "beta", "/etc/app/files")
	if provided != line || held != consumed {
		t.Fatalf("after the first push alpha holds %q and beta %q, want %q and %q", provided, held, line, consumed)
	}
	gamma, err := c.modules.db.LastDeclaration(context.Background(), "gamma")
	if err != nil {
		t.Fatal(err)
	}

	// kept checks that node was sent nothing, its push line naming it
	// and why, and that alpha and beta still hold what they were sent.
	kept := func(step, node, why string, wantSeq uint64) {
		t.Helper()
		pn := pushNode(t, c, node)
		if !strings.Contains(pn.Error, `node "`+node+`"`) || !strings.Contains(pn.Error, why) || !strings.Contains(pn.Error, "nothing was sent to it") {
			t.Errorf("%s: push says of %s %q, want its own failure named (%q)", step, node, pn.Error, why)
		}
		if pn.Seq != 0 {
			t.Errorf("%s: %s was sent declaration %d", step, node, pn.Seq)
		}
		if last, err := c.modules.db.LastDeclaration(context.Background(), node); err != nil || last.Seq != wantSeq {
			t.Errorf("%s: %s's last declaration is %d (%v), want %d kept", step, node, last.Seq, err, wantSeq)
		}
		if got, seq := sentFile(t, c, "alpha", "/srv/store/users"); got != line || seq != alphaSeq {
			t.Errorf("%s: alpha holds %q in declaration %d, want %q in %d: a consumer's line dropped", step, got, seq, line, alphaSeq)
		}
		if got, seq := sentFile(t, c, "beta", "/etc/app/files"); got != consumed || seq != betaSeq {
			t.Errorf("%s: beta holds %q in declaration %d, want %q in %d: a credential withheld", step, got, seq, consumed, betaSeq)
		}
	}

	// gamma's module now consumes the grant, and gamma holds no
	// credential for it.
	registerManifest(t, c, strings.NewReplacer(`"name":"app"`, `"name":"reader"`, `"version":"1"`, `"version":"2"`).Replace(appManifest))
	kept("no credential", "gamma", "holds no credential", gamma.Seq)

	// No registered module provides the grant beta consumes any more
	// (its provider unassigned with --force, then registered without
	// provides): beta keeps its credential and the address it had.
	if _, err := c.modules.unassign(context.Background(), spec.AssignRequest{Module: "files", Node: "alpha", Force: true}); err != nil {
		t.Fatal(err)
	}
	registerManifest(t, c, `{"name":"files","version":"2","routes":[{"name":"files","port":2049}],"resources":[]}`)
	pn := pushNode(t, c, "beta")
	if !strings.Contains(pn.Error, `node "beta"`) || !strings.Contains(pn.Error, "no registered module provides") {
		t.Errorf("no provider: push says of beta %q, want its own failure named", pn.Error)
	}
	if got, seq := sentFile(t, c, "beta", "/etc/app/files"); got != consumed || seq != betaSeq {
		t.Errorf("no provider: beta holds %q in declaration %d, want %q in %d: a credential withheld", got, seq, consumed, betaSeq)
	}
	if got := credentials(t, c)["app-beta"]; got != cred {
		t.Errorf("no provider: the store holds beta's credential %q, want %q kept", got, cred)
	}
}
