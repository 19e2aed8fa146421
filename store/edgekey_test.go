package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// TestEdgeStorageKeyKeptOnce: none is kept at first; the first kept stays,
// and a second keep returns it.
func TestEdgeStorageKeyKeptOnce(t *testing.T) {
	db, _ := openTemp(t)
	ctx := context.Background()
	if _, err := db.EdgeStorageKey(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("before any: %v, want ErrNotFound", err)
	}
	if kept, err := db.KeepEdgeStorageKey(ctx, "first", time.Now()); err != nil || kept != "first" {
		t.Fatalf("keep: %q, %v", kept, err)
	}
	if kept, err := db.KeepEdgeStorageKey(ctx, "second", time.Now()); err != nil || kept != "first" {
		t.Fatalf("keep again: %q, %v; want the first", kept, err)
	}
	if got, err := db.EdgeStorageKey(ctx); err != nil || got != "first" {
		t.Fatalf("read: %q, %v", got, err)
	}
}
