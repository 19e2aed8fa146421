package host_test

import (
	"context"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/spec"
)

// inNamespace marks the test's second run, inside its own mount namespace:
// it holds the mount namespace the first run was in.
const inNamespace = "MESH_TEST_TRUST_NAMESPACE"

// Where Debian keeps local anchors and the store it builds from them.
const (
	debianAnchors = "/usr/local/share/ca-certificates"
	debianStore   = "/etc/ssl/certs"
	debianHooks   = "/etc/ca-certificates/update.d"
)

// TestTrustForReal installs the mesh root in Debian's trust store with the
// real update-ca-certificates, never in this machine's own: the test runs
// itself again inside a private mount namespace (unshare -m), where a tmpfs
// covers /usr/local/share/ca-certificates and a copy of /etc/ssl/certs is
// bound over it (and an empty directory over the store's hooks, which
// would touch the machine's dpkg state). There a leaf the mesh CA issued does not verify against the
// store (openssl verify -CApath, "unable to get local issuer certificate");
// with the trust resource applied at root "/" it does; removed, it fails
// again with the same error. Outside, the machine's own anchors are as they
// were.
func TestTrustForReal(t *testing.T) {
	t.Parallel()
	if outer := os.Getenv(inNamespace); outer != "" {
		trustInNamespace(t, outer)
		return
	}
	optin.NeedSlow(t, "update-ca-certificates relinks Debian's whole store, seconds a run, three runs")
	needRoot(t, "the trust store for real")
	for _, tool := range []string{"unshare", "update-ca-certificates", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv(rootOptIn) == "1" {
				t.Fatalf("%s is missing and %s=1 asks for this test: install util-linux, ca-certificates and openssl", tool, rootOptIn)
			}
			t.Skipf("%s is missing (%s=1 makes this a failure)", tool, rootOptIn)
		}
	}
	for _, dir := range []string{debianAnchors, debianStore} {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Fatalf("%s is not a directory here (%v): the Debian store the test runs against is missing", dir, err)
		}
	}
	before, err := os.ReadDir(debianAnchors)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private",
		os.Args[0], "-test.run", "^TestTrustForReal$", "-test.count=1", "-test.v")
	outer, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatalf("read this mount namespace: %v", err)
	}
	cmd.Env = append(os.Environ(), inNamespace+"="+outer)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test inside its mount namespace: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestTrustForReal") {
		t.Fatalf("the test inside its mount namespace did not pass:\n%s", out)
	}
	t.Logf("inside its mount namespace:\n%s", out)
	after, err := os.ReadDir(debianAnchors)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the machine's own %s changed: %d entries before, %d after", debianAnchors, len(before), len(after))
	}
}

// trustInNamespace is TestTrustForReal inside its mount namespace.
// outer is the mount namespace the test was started in.
func trustInNamespace(t *testing.T, outer string) {
	if own, err := os.Readlink("/proc/self/ns/mnt"); err != nil || own == outer {
		t.Fatalf("not in a mount namespace of its own (%s, started in %s; %v): nothing is mounted", own, outer, err)
	}
	if err := syscall.Mount("tmpfs", debianAnchors, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount a tmpfs over %s: %v", debianAnchors, err)
	}
	certs := filepath.Join(t.TempDir(), "certs")
	if out, err := exec.Command("cp", "-a", debianStore, certs).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v\n%s", debianStore, err, out)
	}
	if err := syscall.Mount(certs, debianStore, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind a copy over %s: %v", debianStore, err)
	}
	// The store's hooks (Java's keystore, where installed) are not the
	// store: they record a dpkg trigger and run dpkg on the machine's own
	// state, outside what the namespace covers, and take most of a
	// refresh's time. An empty directory covers them.
	if st, err := os.Stat(debianHooks); err == nil && st.IsDir() {
		if err := syscall.Mount("tmpfs", debianHooks, "tmpfs", 0, "mode=0755"); err != nil {
			t.Fatalf("mount a tmpfs over %s: %v", debianHooks, err)
		}
	}

	dir := t.TempDir()
	auth, err := ca.Create(filepath.Join(dir, "ca"), "trust", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := auth.IssueServer([]string{"web.alpha.internal"}, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM, interPEM := filepath.Join(dir, "leaf.pem"), filepath.Join(dir, "intermediate.pem")
	for p, der := range map[string][]byte{leafPEM: leaf.Certificate[0], interPEM: leaf.Certificate[1]} {
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	verify := func() (string, error) {
		out, err := exec.Command("openssl", "verify", "-CApath", debianStore, "-untrusted", interPEM, leafPEM).CombinedOutput()
		return string(out), err
	}
	const untrusted = "unable to get local issuer certificate"
	if out, err := verify(); err == nil || !strings.Contains(out, untrusted) {
		t.Fatalf("before the anchor: openssl verify says %q (%v), want %q", out, err, untrusted)
	}

	root := string(ca.RootPEM(auth.Root()))
	e := host.NewEngine(host.Services{Root: "/", CARoot: root})
	r := []spec.Resource{{Name: "ca-trust:trust:mesh", Kind: spec.KindTrust, Module: "ca-trust", Spec: &spec.TrustSpec{Name: "mesh"}}}
	results, record, _ := e.Apply(context.Background(), r, nil)
	if results[0].Outcome != spec.Created || results[0].Note != "" {
		t.Fatalf("apply: %+v, want created with no note", results)
	}
	if out, err := verify(); err != nil {
		t.Fatalf("with the anchor: openssl verify fails: %v\n%s", err, out)
	}
	anchor := debianAnchors + "/mesh-mesh.crt"
	if got := host.TrustInstalled("/", root); got != anchor {
		t.Errorf("trust_installed %q, want %q", got, anchor)
	}
	if results, record, _ = e.Apply(context.Background(), r, record); results[0].Outcome != spec.Unchanged {
		t.Errorf("again: %+v, want unchanged", results)
	}

	results, _, _ = e.Apply(context.Background(), nil, record)
	if results[0].Outcome != spec.Removed || results[0].Error != "" {
		t.Fatalf("removal: %+v", results)
	}
	if out, err := verify(); err == nil || !strings.Contains(out, untrusted) {
		t.Fatalf("after removal: openssl verify says %q (%v), want %q again", out, err, untrusted)
	}
	if got := host.TrustInstalled("/", root); got != "" {
		t.Errorf("trust_installed after removal %q, want none", got)
	}
}
