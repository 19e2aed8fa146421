package mesh

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// Renumber signs the last declaration of each node and the roster in
// force again under sequences raised by the gap, saying what they said,
// issued at the time given: each verifies under the controller's key,
// the content digests are kept, and a node sent nothing is left so.
func TestRenumberRaisesAndSignsAgain(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "controller")
	sealKey, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	then := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := Create(ctx, GenesisConfig{Dir: dir, Mesh: "m", Node: "alpha", Address: "127.0.0.1", SealKey: sealKey.Public().String(), WGKey: newWGKey(), Now: then}); err != nil {
		t.Fatal(err)
	}
	key, err := LoadSignKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddNode(ctx, store.Node{Name: "beta", Address: "127.0.0.2", NKey: "UBETA", Joined: then}); err != nil {
		t.Fatal(err)
	}
	ref := &spec.RosterRef{Seq: 4, Digest: "sha256:ab"}
	decl := spec.Declaration{Mesh: "m", Node: "alpha", Seq: 7, Issued: then, Expires: then.Add(time.Hour), Protocol: spec.Protocol,
		Resources: spec.Resources{}, RosterRef: ref}
	body, _ := json.Marshal(decl)
	if err := db.RecordDeclaration(ctx, store.Declaration{Node: "alpha", Seq: 7, Body: body, Sig: ed25519.Sign(key, body), Content: "sha256:cd", Sent: then, Expires: then.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	doc := spec.RosterDoc{Mesh: "m", Seq: 4, Issued: then, Expires: then.Add(time.Hour), Protocol: spec.Protocol}
	rbody, _ := json.Marshal(doc)
	if err := db.RecordRoster(ctx, store.Roster{Seq: 4, Body: rbody, Sig: ed25519.Sign(key, rbody), Content: "sha256:ef", Sent: then, Expires: then.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	now := then.Add(48 * time.Hour)
	if err := Renumber(ctx, dir, RenumberGap, now); err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(ctx, filepath.Join(dir, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	pub := key.Public().(ed25519.PublicKey)
	d, err := db.LastDeclaration(ctx, "alpha")
	if err != nil {
		t.Fatal(err)
	}
	var got spec.Declaration
	if err := spec.Decode(d.Body, &got); err != nil {
		t.Fatal(err)
	}
	if want := 7 + RenumberGap; d.Seq != want || got.Seq != want || d.Content != "sha256:cd" || !ed25519.Verify(pub, d.Body, d.Sig) {
		t.Fatalf("renumbered declaration: seq %d (body %d), content %s, verifies %v; want %d, sha256:cd, true", d.Seq, got.Seq, d.Content, ed25519.Verify(pub, d.Body, d.Sig), want)
	}
	if !got.Issued.Equal(now) || !got.Expires.Equal(now.Add(spec.DefaultExpiry)) || got.RosterRef == nil || *got.RosterRef != *ref || got.Node != "alpha" {
		t.Fatalf("renumbered declaration: %+v", got)
	}
	if _, err := db.LastDeclaration(ctx, "beta"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("beta, sent nothing, has a declaration after renumbering: %v", err)
	}
	r, err := db.LastRoster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var gotDoc spec.RosterDoc
	if err := spec.Decode(r.Body, &gotDoc); err != nil {
		t.Fatal(err)
	}
	if want := 4 + RenumberGap; r.Seq != want || gotDoc.Seq != want || r.Content != "sha256:ef" || !ed25519.Verify(pub, r.Body, r.Sig) || !gotDoc.Issued.Equal(now) {
		t.Fatalf("renumbered roster: seq %d, %+v", r.Seq, gotDoc)
	}
}

// A sequence that cannot be raised within what the store keeps is
// refused, not wrapped around.
func TestRaisedRefusesOverflow(t *testing.T) {
	if _, err := raised(1<<63-10, RenumberGap); err == nil {
		t.Fatal("a sequence raised past 2^63-1 was taken")
	}
	if got, err := raised(5, 10); err != nil || got != 15 {
		t.Fatalf("raised(5, 10) = %d, %v", got, err)
	}
}
