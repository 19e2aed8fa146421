package launch

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// TestSnapshotHoldsTheStoreOnly: the copy taken before a controller's
// version runs is the store alone (VACUUM INTO): the at-rest key beside it
// (D/controller/seal.key) is neither copied nor inside it, so a snapshot
// holds secret settings sealed and never the key that opens them.
func TestSnapshotHoldsTheStoreOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ctl := statedir.Controller(dir)
	if err := os.MkdirAll(ctl, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(ctx, filepath.Join(ctl, dbFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := db.AddCADomain(ctx, "example.org", time.Now()); err != nil {
		t.Fatal(err)
	}
	db.Close()
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(filepath.Join(ctl, "seal.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	l := &Launcher{cfg: Config{Dir: dir, Mode: Controller}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := l.beforeTrial(ctx, pick{digest: "new", fallback: "old"}); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(ctl)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), dbFile+"-") { // the store's own -wal and -shm
			names = append(names, e.Name())
		}
	}
	if want := []string{"mesh.db", "mesh.db.before-new", "seal.key"}; !slices.Equal(names, want) {
		t.Fatalf("D/controller holds %v after the snapshot, want %v", names, want)
	}
	snap, err := os.ReadFile(l.snapshotPath("new"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(snap, key) {
		t.Error("the snapshot holds the at-rest key")
	}
	if !bytes.Contains(snap, []byte("example.org")) {
		t.Error("the snapshot does not hold the store's rows")
	}
}
