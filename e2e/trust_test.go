package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/spec"
)

// TestTrustThroughTheMesh: examples/ca-trust, assigned and pushed to a
// node whose --root holds a Debian trust store (its anchor directory and a
// stand-in update-ca-certificates: under a root that is not "/" the host
// does not run it), installs the root genesis made, as the host pinned it
// at join, at /usr/local/share/ca-certificates/mesh-mesh.crt; the report
// says the store was not refreshed, and the node's facts (mesh node show)
// name the anchor. Unassigned and pushed, the anchor goes and the fact
// with it.
func TestTrustThroughTheMesh(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, d := range []string{"usr/local/share/ca-certificates", "usr/sbin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/sbin/update-ca-certificates"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := newMesh(t, "--root", root)
	auth, err := ca.Load(filepath.Join(m.dir, "controller", mesh.CADir))
	if err != nil {
		t.Fatal(err)
	}
	want := string(ca.RootPEM(auth.Root()))
	const anchor = "/usr/local/share/ca-certificates/mesh-mesh.crt"

	mustRun(t, "module", "register", "--dir", m.dir, example("ca-trust"))
	mustRun(t, "assign", "--dir", m.dir, "ca-trust", "alpha")
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("push: exit %d %+v", code, o)
	}
	if got, err := os.ReadFile(filepath.Join(root, anchor)); err != nil || string(got) != want {
		t.Fatalf("%s holds %q (%v), want the mesh root", anchor, got, err)
	}
	poll.Until(t, 20*time.Second, "the report and the facts name the anchor", func() error {
		n := nodeShow(t, m.dir, "alpha")
		note := ""
		if n.LastReport != nil {
			for _, r := range n.LastReport.Results {
				if r.Name == "ca-trust:trust:mesh" && r.Outcome == spec.Created {
					note = r.Note
				}
			}
		}
		if n.Facts == nil || n.Facts.TrustInstalled != anchor || !strings.Contains(note, "the trust store was not refreshed") {
			return errors.New("note " + note + "; facts " + factsTrust(n))
		}
		return nil
	})
	if out := mustRun(t, "node", "show", "--dir", m.dir, "alpha"); !strings.Contains(out, "trust store       the mesh root is installed: "+anchor) {
		t.Errorf("mesh node show does not say the root is installed:\n%s", out)
	}

	mustRun(t, "unassign", "--dir", m.dir, "ca-trust", "alpha")
	if o, code := pushJSON(t, m.dir); code != 0 || !o.OK {
		t.Fatalf("push after unassign: exit %d %+v", code, o)
	}
	if _, err := os.Lstat(filepath.Join(root, anchor)); !os.IsNotExist(err) {
		t.Errorf("%s after unassign: %v, want it gone", anchor, err)
	}
	poll.Until(t, 20*time.Second, "the facts say the root is not installed", func() error {
		n := nodeShow(t, m.dir, "alpha")
		if n.Facts != nil && n.Facts.TrustInstalled == "" {
			return nil
		}
		return errors.New(factsTrust(n))
	})
}

func factsTrust(n spec.Node) string {
	if n.Facts == nil {
		return "no facts"
	}
	return "trust_installed " + n.Facts.TrustInstalled
}
