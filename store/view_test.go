package store_test

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// A write under a revision records it with its effect; one refused
// records nothing, and leaves the applied revision as it was.
func TestWriteRecordsItsRevision(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	if rev, err := db.Applied(ctx); err != nil || rev != 0 {
		t.Fatalf("Applied on a new store = %d, %v; want 0", rev, err)
	}
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	wctx := store.WithRevision(ctx, 7)
	if _, err := db.RegisterModules(wctx, []spec.Module{{Name: "web", Version: "1"}}, at); err != nil {
		t.Fatal(err)
	}
	if !store.Recorded(wctx) {
		t.Error("Recorded = false after a write under a revision")
	}
	if rev, err := db.Applied(ctx); err != nil || rev != 7 {
		t.Fatalf("Applied = %d, %v; want 7", rev, err)
	}
	wctx = store.WithRevision(ctx, 8)
	if err := db.Unassign(wctx, "web", "nowhere"); err == nil {
		t.Fatal("Unassign of no assignment: no error")
	}
	if rev, _ := db.Applied(ctx); rev != 7 {
		t.Errorf("Applied after a refused write = %d, want 7", rev)
	}
	if err := db.MarkApplied(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if rev, _ := db.Applied(ctx); rev != 8 {
		t.Errorf("Applied after MarkApplied(8) = %d", rev)
	}
}

// ChangeSettings makes a change only while the settings are still those
// it was computed from.
func TestChangeSettingsOnlyFromWhatItRead(t *testing.T) {
	ctx := context.Background()
	db, _ := openTemp(t)
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := db.RegisterModules(ctx, []spec.Module{{Name: "web", Version: "1"}}, at); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0.1", NKey: "U" + n, Joined: at}); err != nil {
			t.Fatal(err)
		}
		if err := db.Assign(ctx, "web", n, map[string]string{"k": "v"}, at); err != nil {
			t.Fatal(err)
		}
	}
	n, err := db.ChangeSettings(ctx, []store.SettingsChange{
		{Module: "web", Node: "a", From: map[string]string{"k": "v"}, To: map[string]string{"k": "w"}},
		{Module: "web", Node: "b", From: map[string]string{"k": "old"}, To: map[string]string{"k": "w"}},
		{Module: "web", Node: "c", From: map[string]string{}, To: map[string]string{"k": "w"}},
	})
	if err != nil || n != 1 {
		t.Fatalf("ChangeSettings = %d, %v; want 1", n, err)
	}
	for node, want := range map[string]string{"a": "w", "b": "v"} {
		a, err := db.Assignment(ctx, "web", node)
		if err != nil || a.Settings["k"] != want {
			t.Errorf("settings of web on %s = %v, %v; want k=%s", node, a.Settings, err, want)
		}
	}
}

// A store that is a view of a log does not sync each commit (the log
// keeps the writes synced); a plain store syncs every one. Sync makes a
// view's commits durable.
func TestViewOfLogCommitsUnsynced(t *testing.T) {
	for _, c := range []struct {
		opts store.Options
		want string
	}{{store.Options{}, "synchronous(FULL)"}, {store.Options{ViewOfLog: true}, "synchronous(NORMAL)"}} {
		if dsn := c.opts.DSN("/d/mesh.db"); !strings.Contains(dsn, url.QueryEscape(c.want)) {
			t.Errorf("DSN with %+v = %q, lacks %s", c.opts, dsn, c.want)
		}
	}
	ctx := context.Background()
	db, err := store.OpenWith(ctx, filepath.Join(t.TempDir(), "mesh.db"), store.Options{ViewOfLog: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.MarkApplied(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if err := db.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if rev, err := db.Applied(ctx); err != nil || rev != 7 {
		t.Fatalf("Applied after Sync = %d, %v; want 7", rev, err)
	}
}
