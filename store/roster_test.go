package store_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// TestRosterSequenceOnlyRises: the roster in force is the last recorded;
// a sequence not above it is refused and changes nothing; only the last
// few are kept, and none recorded is ErrNotFound.
func TestRosterSequenceOnlyRises(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, path := openTemp(t)
	if _, err := db.LastRoster(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no roster recorded: %v, want ErrNotFound", err)
	}
	if _, err := db.LastRosterSeq(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no roster recorded: its sequence %v, want ErrNotFound", err)
	}
	sent := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for seq := uint64(1); seq <= 20; seq++ {
		r := store.Roster{Seq: seq, Body: []byte(`{"roster_seq":1}`), Sig: []byte("s"), Content: "sha256:x", Sent: sent, Expires: sent.Add(time.Hour)}
		if err := db.RecordRoster(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, seq := range []uint64{20, 3} {
		err := db.RecordRoster(ctx, store.Roster{Seq: seq, Body: []byte("{}"), Sig: []byte("t"), Content: "sha256:y", Sent: sent, Expires: sent})
		if err == nil || !strings.Contains(err.Error(), "is not above the last sent, 20") {
			t.Fatalf("roster %d after 20: %v, want refused", seq, err)
		}
	}
	got, err := db.LastRoster(ctx)
	if err != nil || got.Seq != 20 || got.Content != "sha256:x" || string(got.Sig) != "s" || !got.Expires.Equal(sent.Add(time.Hour)) {
		t.Fatalf("the roster in force: %+v, %v", got, err)
	}
	if seq, err := db.LastRosterSeq(ctx); err != nil || seq != 20 {
		t.Fatalf("the last roster's sequence: %d, %v, want 20", seq, err)
	}
	raw, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var kept int
	if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM rosters`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept != 8 {
		t.Fatalf("%d rosters kept, want the last 8", kept)
	}
}
