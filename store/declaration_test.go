package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// TestDeclarationKeepsItsContentDigest: the digest of what a declaration
// holds is kept with it and replaced with it; a row recorded before the
// store kept digests reads as "".
func TestDeclarationKeepsItsContentDigest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, path := openTemp(t)
	sent := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, n := range []string{"alpha", "beta"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0.1", NKey: "U" + n, Joined: sent}); err != nil {
			t.Fatal(err)
		}
	}
	for i, content := range []string{"sha256:one", "sha256:two"} {
		d := store.Declaration{Node: "alpha", Seq: uint64(i + 1), Body: []byte("{}"), Sig: []byte("s"), Content: content, Sent: sent, Expires: sent.Add(time.Hour)}
		if err := db.RecordDeclaration(ctx, d); err != nil {
			t.Fatal(err)
		}
		if got, err := db.LastDeclaration(ctx, "alpha"); err != nil || got.Seq != d.Seq || got.Content != content {
			t.Fatalf("after recording %d: %+v, %v; want its content %s", d.Seq, got, err, content)
		}
	}
	raw, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`INSERT INTO declarations (node, seq, body, sig, sent_at, expires_at) VALUES ('beta', 1, '{}', 's', ?, ?)`,
		sent.Format(time.RFC3339Nano), sent.Add(time.Hour).Format(time.RFC3339Nano)); err != nil {
		t.Fatal(err)
	}
	if got, err := db.LastDeclaration(ctx, "beta"); err != nil || got.Seq != 1 || got.Content != "" {
		t.Fatalf("a row without a digest: %+v, %v; want content \"\"", got, err)
	}
}
