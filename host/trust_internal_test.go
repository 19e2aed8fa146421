package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// testRoot stands for the mesh root: the trust applier installs the bytes
// it is given, whatever they are.
const testRoot = "-----BEGIN CERTIFICATE-----\nMIIBmesh\n-----END CERTIFICATE-----\n"

// stubRefresh is a refresher standing in for the store's command (the seam:
// the real one rebuilds the machine's own store). It records each argv.
type stubRefresh struct {
	calls [][]string
	fail  error
}

func (s *stubRefresh) run(_ context.Context, _ string, argv []string) (string, error) {
	s.calls = append(s.calls, argv)
	return "", s.fail
}

// fakeStore lays out store's anchor directory and its command (at
// cmdDir) under a new root.
func fakeStore(t *testing.T, store trustStore, cmdDir string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, store.dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if cmdDir != "" {
		if err := os.MkdirAll(filepath.Join(root, cmdDir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, cmdDir, store.command[0]), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// trustEngine is an engine under root holding testRoot, its trust applier
// refreshing through stub.
func trustEngine(root string, stub *stubRefresh) *Engine {
	e := NewEngine(Services{Root: root, CARoot: testRoot})
	e.Appliers[spec.KindTrust] = trustApplier{root: root, caRoot: testRoot, refresh: stub.run}
	return e
}

func trustResource(name string) spec.Resource {
	return spec.Resource{Name: "ca-trust:trust:" + name, Kind: spec.KindTrust, Module: "ca-trust", Spec: &spec.TrustSpec{Name: name}}
}

// TestTrustInstallsOnceAndRemoves: in each distribution's store (a fake
// root with its anchor directory and its command, the command stubbed), a
// trust resource writes the mesh root as mesh-NAME.crt and runs the
// store's refresh command once, with the arguments that store takes;
// applied again it writes nothing and runs nothing; removed, the anchor goes
// and the command runs once more. The host's fact names the anchor while it
// is there.
func TestTrustInstallsOnceAndRemoves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		store  trustStore
		cmdDir string
		argv   []string
	}{
		{trustStores[0], "/usr/sbin", []string{"/usr/sbin/update-ca-certificates"}},
		{trustStores[1], "/usr/bin", []string{"/usr/bin/update-ca-trust", "extract"}},
		{trustStores[2], "/usr/bin", []string{"/usr/bin/trust", "extract-compat"}},
	} {
		t.Run(tc.store.distro, func(t *testing.T) {
			t.Parallel()
			root := fakeStore(t, tc.store, tc.cmdDir)
			stub := &stubRefresh{}
			e := trustEngine(root, stub)
			anchor := tc.store.dir + "/mesh-mesh.crt"
			r := []spec.Resource{trustResource("mesh")}

			results, record, _ := e.Apply(context.Background(), r, nil)
			if len(results) != 1 || results[0].Outcome != spec.Created {
				t.Fatalf("first apply: %+v, want created", results)
			}
			if got, err := os.ReadFile(filepath.Join(root, anchor)); err != nil || string(got) != testRoot {
				t.Fatalf("anchor %s holds %q (%v), want the mesh root", anchor, got, err)
			}
			if st, _ := os.Stat(filepath.Join(root, anchor)); st.Mode().Perm() != 0o644 {
				t.Errorf("anchor mode %v, want 0644", st.Mode().Perm())
			}
			if len(stub.calls) != 1 || !slices.Equal(stub.calls[0], tc.argv) {
				t.Fatalf("refresh ran %q, want once %q", stub.calls, tc.argv)
			}
			if got := TrustInstalled(root, testRoot); got != anchor {
				t.Errorf("trust_installed %q, want %q", got, anchor)
			}

			results, record, writes := e.Apply(context.Background(), r, record)
			if results[0].Outcome != spec.Unchanged || writes != 0 || len(stub.calls) != 1 {
				t.Fatalf("again: %+v, %d writes, refresh ran %d times; want unchanged, 0 writes, still once", results, writes, len(stub.calls))
			}

			results, _, _ = e.Apply(context.Background(), nil, record)
			if len(results) != 1 || results[0].Outcome != spec.Removed || results[0].Error != "" {
				t.Fatalf("removal: %+v", results)
			}
			if _, err := os.Lstat(filepath.Join(root, anchor)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("anchor after removal: %v, want it gone", err)
			}
			if len(stub.calls) != 2 || !slices.Equal(stub.calls[1], tc.argv) {
				t.Errorf("refresh after removal ran %q, want %q a second time", stub.calls, tc.argv)
			}
			if got := TrustInstalled(root, testRoot); got != "" {
				t.Errorf("trust_installed after removal %q, want none", got)
			}
		})
	}
}

// TestTrustRewritesAnotherRoot: an anchor of that name holding something
// else is rewritten (changed) and the store refreshed once.
func TestTrustRewritesAnotherRoot(t *testing.T) {
	t.Parallel()
	root := fakeStore(t, trustStores[0], "/usr/sbin")
	anchor := filepath.Join(root, trustStores[0].dir, "mesh-mesh.crt")
	if err := os.WriteFile(anchor, []byte("an old root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stub := &stubRefresh{}
	results, _, _ := trustEngine(root, stub).Apply(context.Background(), []spec.Resource{trustResource("mesh")}, nil)
	if results[0].Outcome != spec.Changed || len(stub.calls) != 1 {
		t.Fatalf("%+v, refresh ran %d times; want changed and once", results, len(stub.calls))
	}
	if got, _ := os.ReadFile(anchor); string(got) != testRoot {
		t.Errorf("anchor holds %q, want the mesh root", got)
	}
}

// TestTrustFailsWithoutAStore: a machine with none of the stores, or with
// a store's directory but not its command, fails the resource naming every
// directory and command it looked for, and writes nothing.
func TestTrustFailsWithoutAStore(t *testing.T) {
	t.Parallel()
	for name, root := range map[string]string{
		"nothing":        t.TempDir(),
		"no command":     fakeStore(t, trustStores[0], ""),
		"not a dir":      fakeFileAt(t, trustStores[1].dir),
		"command only":   fakeCommandOnly(t),
		"link out of it": fakeLinkOut(t),
	} {
		stub := &stubRefresh{}
		results, _, writes := trustEngine(root, stub).Apply(context.Background(), []spec.Resource{trustResource("mesh")}, nil)
		if results[0].Outcome != spec.Failed || writes != 0 || len(stub.calls) != 0 {
			t.Errorf("%s: %+v, %d writes, %d refreshes; want failed, nothing written or run", name, results, writes, len(stub.calls))
			continue
		}
		for _, want := range []string{"no trust store under", "/usr/local/share/ca-certificates with update-ca-certificates", "/etc/pki/ca-trust/source/anchors with update-ca-trust", "/etc/ca-certificates/trust-source/anchors with trust"} {
			if !strings.Contains(results[0].Error, want) {
				t.Errorf("%s: error %q does not name %q", name, results[0].Error, want)
			}
		}
	}
}

func fakeFileAt(t *testing.T, p string) string {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
	os.WriteFile(filepath.Join(root, p), nil, 0o644)
	os.MkdirAll(filepath.Join(root, "/usr/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "/usr/bin/update-ca-trust"), nil, 0o755)
	return root
}

func fakeCommandOnly(t *testing.T) string {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "/usr/sbin"), 0o755)
	os.WriteFile(filepath.Join(root, "/usr/sbin/update-ca-certificates"), nil, 0o755)
	return root
}

// fakeLinkOut has the Debian store's directory as a link to the machine's
// own: it leads out of the root, so it is not the root's store.
func fakeLinkOut(t *testing.T) string {
	root := fakeCommandOnly(t)
	os.MkdirAll(filepath.Join(root, "/usr/local/share"), 0o755)
	os.Symlink("/tmp", filepath.Join(root, "/usr/local/share/ca-certificates"))
	return root
}

// TestTrustRefreshFailureTakesTheAnchorOut: a refresh command that fails
// fails the resource and leaves no anchor, so the next pass installs it and
// refreshes again.
func TestTrustRefreshFailureTakesTheAnchorOut(t *testing.T) {
	t.Parallel()
	root := fakeStore(t, trustStores[0], "/usr/sbin")
	stub := &stubRefresh{fail: errors.New("exit status 1")}
	e := trustEngine(root, stub)
	r := []spec.Resource{trustResource("mesh")}
	results, record, _ := e.Apply(context.Background(), r, nil)
	if results[0].Outcome != spec.Failed || !strings.Contains(results[0].Error, "taken out again") {
		t.Fatalf("%+v, want failed saying the anchor was taken out", results)
	}
	if got := TrustInstalled(root, testRoot); got != "" {
		t.Fatalf("anchor %s left after a failed refresh", got)
	}
	stub.fail = nil
	results, _, _ = e.Apply(context.Background(), r, record)
	if results[0].Outcome != spec.Created || len(stub.calls) != 2 {
		t.Errorf("next pass: %+v, %d refreshes; want created, refreshed again", results, len(stub.calls))
	}
}

// TestTrustNotRefreshedUnderAnotherRoot: the real refresher does not run
// the command under a root that is not "/" (it would rebuild the machine's
// own store): the anchor is written and the note says the store was not
// refreshed.
func TestTrustNotRefreshedUnderAnotherRoot(t *testing.T) {
	t.Parallel()
	root := fakeStore(t, trustStores[0], "/usr/sbin")
	e := NewEngine(Services{Root: root, CARoot: testRoot})
	results, _, _ := e.Apply(context.Background(), []spec.Resource{trustResource("mesh")}, nil)
	if results[0].Outcome != spec.Created || !strings.Contains(results[0].Note, "the trust store was not refreshed") {
		t.Fatalf("%+v, want created with a note that the store was not refreshed", results)
	}
	if got := TrustInstalled(root, testRoot); got != "/usr/local/share/ca-certificates/mesh-mesh.crt" {
		t.Errorf("trust_installed %q", got)
	}
}

// TestTrustWithoutARoot: a host that holds no mesh root fails the resource
// saying so.
func TestTrustWithoutARoot(t *testing.T) {
	t.Parallel()
	root := fakeStore(t, trustStores[0], "/usr/sbin")
	results, _, _ := NewEngine(Services{Root: root}).Apply(context.Background(), []spec.Resource{trustResource("mesh")}, nil)
	if results[0].Outcome != spec.Failed || !strings.Contains(results[0].Error, "holds no mesh root") {
		t.Fatalf("%+v, want failed saying the host holds no root", results)
	}
}

// TestTrustPreviewChangesNothing: a dry run says the anchor would be
// created, writes no anchor and runs no refresh; once installed it says
// unchanged.
func TestTrustPreviewChangesNothing(t *testing.T) {
	t.Parallel()
	root := fakeStore(t, trustStores[2], "/usr/bin")
	stub := &stubRefresh{}
	e := trustEngine(root, stub)
	r := []spec.Resource{trustResource("mesh")}
	if got := e.Preview(context.Background(), r, nil); got[0].Outcome != spec.Created || len(stub.calls) != 0 || TrustInstalled(root, testRoot) != "" {
		t.Fatalf("preview: %+v, %d refreshes, installed %q; want created and nothing done", got, len(stub.calls), TrustInstalled(root, testRoot))
	}
	_, record, _ := e.Apply(context.Background(), r, nil)
	if got := e.Preview(context.Background(), r, record); got[0].Outcome != spec.Unchanged {
		t.Errorf("preview once installed: %+v, want unchanged", got)
	}
}
