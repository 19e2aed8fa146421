package mesh

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// TestSecretSealedToItsNode: a file that takes a secret travels sealed to
// its node: the declaration on the stream holds neither the value nor its
// plain digest, alpha's key opens it and another node's does not; a push
// that changes nothing sends nothing (the sealed bytes are reused), and a
// changed value is sealed anew.
func TestSecretSealedToItsNode(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	assign := func(secret string) {
		t.Helper()
		if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "alpha",
			Settings: map[string]string{"token": secret, "who": "w"}}); err != nil {
			t.Fatal(err)
		}
	}
	push := func() spec.PushNode {
		t.Helper()
		res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}})
		if err != nil || res.Nodes[0].Error != "" {
			t.Fatalf("push: %v %+v", err, res.Nodes)
		}
		return res.Nodes[0]
	}
	sealedFile := func() *spec.FileSpec {
		t.Helper()
		for _, r := range lastOnStream(t, c, "alpha").Resources {
			if f, ok := r.Spec.(*spec.FileSpec); ok && f.Path == "/srv/vault/env" {
				return f
			}
		}
		t.Fatal("the declaration holds no /srv/vault/env")
		return nil
	}
	secret := distinct("SuperSecret-")
	assign(secret)
	first := push()
	f := sealedFile()
	plain := []byte("token=" + secret + " who=w")
	if len(f.Content) > 0 || !f.Secret || !strings.HasPrefix(f.Digest, spec.SealedDigestPrefix) {
		t.Fatalf("the declared file: content %q secret %v digest %q, want sealed with a keyed digest", f.Content, f.Secret, f.Digest)
	}
	if got, err := alphaSealKey.Open(f.Sealed); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("alpha's key opens %q, %v; want %q", got, err, plain)
	}
	other, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(f.Sealed); err == nil {
		t.Fatal("another node's key opens alpha's secret")
	}
	raw, err := db.LastDeclaration(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw.Body, []byte(secret)) || bytes.Contains(raw.Body, []byte(spec.ContentDigest(plain))) {
		t.Fatal("the recorded declaration holds the secret or its plain digest")
	}

	if again := push(); !again.Unchanged || again.Seq != first.Seq {
		t.Fatalf("a push that changes nothing: %+v, want unchanged at %d", again, first.Seq)
	}
	sealedBefore := f.Sealed
	assign(distinct("Other-"))
	if changed := push(); changed.Unchanged || changed.Seq != first.Seq+1 {
		t.Fatalf("a push of a new value: %+v, want sent", changed)
	}
	if sealedFile().Sealed == sealedBefore {
		t.Fatal("a new value travels in the old sealed bytes")
	}
}

// TestNodeWithoutSealingKeyIsItsOwnFailure: a node whose host holds no
// sealing key, assigned a secret, is its own failure, naming what to do;
// the others are sent theirs.
func TestNodeWithoutSealingKeyIsItsOwnFailure(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "127.0.0.2", NKey: "Ubeta", Joined: clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"alpha", "beta"} {
		if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: node, Settings: map[string]string{"token": "t", "who": "w"}}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.push(ctx, spec.PushRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range res.Nodes {
		switch n.Node {
		case "alpha":
			if n.Error != "" || n.Seq == 0 {
				t.Errorf("alpha: %+v, want sent", n)
			}
		case "beta":
			if !strings.Contains(n.Error, "holds no sealing key") || !strings.Contains(n.Error, "join it again") {
				t.Errorf("beta: %+v, want its own failure naming the missing key", n)
			}
		}
	}
}

// failLastDeclaration fails LastDeclaration while on.
type failLastDeclaration struct {
	Store
	on atomic.Bool
}

func (f *failLastDeclaration) LastDeclaration(ctx context.Context, node string) (store.Declaration, error) {
	if f.on.Load() {
		return store.Declaration{}, errors.New("disk I/O error")
	}
	return f.Store.LastDeclaration(ctx, node)
}

// TestSealerReadFailureIsNotNothing: a read of the last declaration that
// fails while sealing fails the push, naming the node and the read; it is
// never taken for "nothing sealed before" (which would seal afresh and
// send every node with a secret a new declaration).
func TestSealerReadFailureIsNotNothing(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	var seam *failLastDeclaration
	c, db := newControllerWith(t, clk, func(db *store.DB) Store { seam = &failLastDeclaration{Store: db}; return seam })
	ctx := context.Background()
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "alpha", Settings: map[string]string{"token": "t", "who": "w"}}); err != nil {
		t.Fatal(err)
	}
	// As a controller that started since: nothing of alpha kept, so the
	// seal reads alpha's last declaration.
	c.composer.sealer.nodes = nil
	seam.on.Store(true)
	_, err := c.push(ctx, spec.PushRequest{})
	if err == nil || !strings.Contains(err.Error(), `last declaration of node "alpha"`) || !strings.Contains(err.Error(), "disk I/O error") {
		t.Fatalf("push with the read failing: %v, want it to fail naming alpha and the read", err)
	}
}

// TestContainerSecretSealedToItsNode: a container's secret travels sealed
// to its node, with a keyed digest: the recorded declaration holds neither
// the value nor a plain digest of it, and alpha's key opens it. A push that
// changes nothing sends nothing (the sealed bytes are reused); a changed
// value is sealed anew under a new digest, which changes the container.
func TestContainerSecretSealedToItsNode(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if err := db.RecordFacts(ctx, spec.Facts{Node: "alpha", Capabilities: []string{spec.CapContainers}}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	m := spec.Module{Name: "app", Version: "1", Settings: []spec.Setting{{Name: "db_password", Type: spec.TypeString, Secret: true}},
		Resources: spec.Resources{{Name: spec.ResourceName("app", spec.KindContainer, "app"), Kind: spec.KindContainer, Module: "app",
			Spec: &spec.ContainerSpec{Name: "app", Image: "example/app:1",
				Secrets: []spec.SecretMount{{Setting: "db_password", Target: "/run/secrets/db_password"}}}}}}
	if _, err := db.RegisterModules(ctx, []spec.Module{m}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	assign := func(secret string) {
		t.Helper()
		if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "app", Node: "alpha", Settings: map[string]string{"db_password": secret}}); err != nil {
			t.Fatal(err)
		}
	}
	push := func() spec.PushNode {
		t.Helper()
		res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"alpha"}})
		if err != nil || res.Nodes[0].Error != "" {
			t.Fatalf("push: %v %+v", err, res.Nodes)
		}
		return res.Nodes[0]
	}
	sealedMount := func() spec.SecretMount {
		t.Helper()
		for _, r := range lastOnStream(t, c, "alpha").Resources {
			if ct, ok := r.Spec.(*spec.ContainerSpec); ok && ct.Name == "app" && len(ct.Secrets) == 1 {
				return ct.Secrets[0]
			}
		}
		t.Fatal("the declaration holds no container app with one secret")
		return spec.SecretMount{}
	}
	secret := distinct("DbPassword-")
	assign(secret)
	first := push()
	sm := sealedMount()
	if sm.Value != "" || sm.Sealed == "" || !strings.HasPrefix(sm.Digest, spec.SealedDigestPrefix) {
		t.Fatalf("the declared secret: %+v, want sealed with a keyed digest", sm)
	}
	if got, err := alphaSealKey.Open(sm.Sealed); err != nil || string(got) != secret {
		t.Fatalf("alpha's key opens %q, %v; want the value", got, err)
	}
	raw, err := db.LastDeclaration(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw.Body, []byte(secret)) || bytes.Contains(raw.Body, []byte(spec.ContentDigest([]byte(secret)))) {
		t.Fatal("the recorded declaration holds the secret or its plain digest")
	}

	if again := push(); !again.Unchanged || again.Seq != first.Seq {
		t.Fatalf("a push that changes nothing: %+v, want unchanged at %d", again, first.Seq)
	}
	assign(distinct("Other-"))
	if changed := push(); changed.Unchanged || changed.Seq != first.Seq+1 {
		t.Fatalf("a push of a new value: %+v, want sent", changed)
	}
	if now := sealedMount(); now.Sealed == sm.Sealed || now.Digest == sm.Digest {
		t.Fatal("a new value travels in the old sealed bytes or under the old digest")
	}
}

// TestRejoinedNodeHoldsNoOldSecret: a node removed and joined again has a
// new sealing key, and is sent none of the values it held before until it
// is assigned again.
func TestRejoinedNodeHoldsNoOldSecret(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	if _, err := db.RegisterModules(ctx, []spec.Module{vaultModule()}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	joinNode(t, c, "beta")
	first, err := db.Node(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "beta", Settings: map[string]string{"token": "old", "who": "w"}}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"beta"}}); err != nil || res.Nodes[0].Error != "" {
		t.Fatalf("push: %v %+v", err, res)
	}
	if _, err := c.enrolment.removeNode(ctx, spec.NodeRemoveRequest{Name: "beta"}); err != nil {
		t.Fatal(err)
	}
	joinNode(t, c, "beta")
	again, err := db.Node(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	if again.SealKey == "" || again.SealKey == first.SealKey {
		t.Fatalf("the rejoined node's sealing key %q, the first %q: want a new one", again.SealKey, first.SealKey)
	}
	if res, err := c.push(ctx, spec.PushRequest{Nodes: []string{"beta"}}); err != nil || res.Nodes[0].Error != "" {
		t.Fatalf("push after the rejoin: %v %+v", err, res)
	}
	for _, r := range lastOnStream(t, c, "beta").Resources {
		if r.Module == "vault" {
			t.Fatalf("the rejoined node is sent %s, assigned to the node before it", r.Name)
		}
	}
}
