package host_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
)

// sealedDecl declares a file at p whose content is sealed to pub.
func sealedDecl(t *testing.T, p string, pub seal.NodePublic, content string) spec.Resource {
	t.Helper()
	text, err := seal.SealTo(pub, []byte(content))
	if err != nil {
		t.Fatal(err)
	}
	return spec.Resource{
		Name: spec.ResourceName("test", spec.KindFile, p), Kind: spec.KindFile, Module: "test",
		Spec: &spec.FileSpec{Path: p, Mode: 0o600, Secret: true, Sealed: text, Size: int64(len(content)),
			Digest: spec.SealedDigestPrefix + strings.Repeat("ab", 32)},
	}
}

// TestSealedFileApplied: a file sealed to this node is written opened, and
// applied again changes nothing; one sealed to another node, one that
// reaches a host with no sealing key, and a secret that came unsealed each
// fail saying why, and write nothing.
func TestSealedFileApplied(t *testing.T) {
	t.Parallel()
	mine, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	e := host.NewEngine(host.Services{Root: root, SealKey: mine})
	r := sealedDecl(t, "/etc/app/token", mine.Public(), "s3cret\n")
	results, record, writes := e.Apply(context.Background(), []spec.Resource{r}, nil)
	checkOutcomes(t, results, allOutcome([]spec.Resource{r}, spec.Created))
	if got, err := os.ReadFile(filepath.Join(root, "etc/app/token")); err != nil || string(got) != "s3cret\n" {
		t.Fatalf("the file holds %q, %v; want the opened content", got, err)
	}
	if writes == 0 {
		t.Fatal("the apply counted no write")
	}
	results, _, writes = e.Apply(context.Background(), []spec.Resource{r}, record)
	checkOutcomes(t, results, allOutcome([]spec.Resource{r}, spec.Unchanged))
	if writes != 0 {
		t.Fatalf("the same sealed file again: %d writes, want 0", writes)
	}

	unsealed := fileDecl("/etc/app/plain", 0o600, "s3cret\n")
	unsealed.Spec.(*spec.FileSpec).Secret = true
	for _, tc := range []struct {
		name string
		e    *host.Engine
		r    spec.Resource
		want string
	}{
		{"sealed to another node", e, sealedDecl(t, "/etc/app/other", theirs.Public(), "x"), "open its sealed content"},
		{"no sealing key", host.NewEngine(host.Services{Root: root}), sealedDecl(t, "/etc/app/nokey", mine.Public(), "x"), "keeps no sealing key"},
		{"secret unsealed", e, unsealed, "came unsealed"},
	} {
		results, _, _ := tc.e.Apply(context.Background(), []spec.Resource{tc.r}, nil)
		if len(results) != 1 || results[0].Outcome != spec.Failed || !strings.Contains(results[0].Error, tc.want) {
			t.Errorf("%s: %+v, want failed saying %q", tc.name, results, tc.want)
		}
		if _, err := os.Stat(filepath.Join(root, tc.r.Target())); !os.IsNotExist(err) {
			t.Errorf("%s: %s was written (%v)", tc.name, tc.r.Target(), err)
		}
	}
}
