package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
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

// TestRecordDeclarations: a batch is recorded as one: each node's row
// replaced, a sequence not above its node's last refused as that node's
// failure while the others are recorded, and the heads read back without
// the bodies (but for a row without a digest, whose body is read).
func TestRecordDeclarations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, path := openTemp(t)
	sent := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, n := range []string{"alpha", "beta", "gamma", "delta"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0.1", NKey: "U" + n, Joined: sent}); err != nil {
			t.Fatal(err)
		}
	}
	decl := func(node string, seq uint64) store.Declaration {
		return store.Declaration{Node: node, Seq: seq, Body: []byte(`{"seq":` + strconv.FormatUint(seq, 10) + `}`), Sig: []byte("s"),
			Content: "sha256:" + node, Sent: sent, Expires: sent.Add(time.Hour)}
	}
	if err := db.RecordDeclaration(ctx, decl("beta", 5)); err != nil {
		t.Fatal(err)
	}
	failed, err := db.RecordDeclarations(ctx, []store.Declaration{decl("alpha", 1), decl("beta", 5), decl("gamma", 1<<63), decl("delta", 2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 2 || !strings.Contains(fmt.Sprint(failed["beta"]), "not above the last sent, 5") || !strings.Contains(fmt.Sprint(failed["gamma"]), "above 2^63-1") {
		t.Fatalf("failed %v, want beta (not above 5) and gamma (too large)", failed)
	}
	raw, err := sql.Open("sqlite", store.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE declarations SET content = '' WHERE node = 'delta'`); err != nil {
		t.Fatal(err)
	}
	heads, err := db.DeclarationHeads(ctx, []string{"alpha", "beta", "gamma", "delta", "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		seq     uint64
		content string
		body    string
	}{"alpha": {1, "sha256:alpha", ""}, "beta": {5, "sha256:beta", ""}, "delta": {2, "", `{"seq":2}`}}
	if len(heads) != len(want) {
		t.Fatalf("heads of %d nodes, want %d: %+v", len(heads), len(want), heads)
	}
	for node, w := range want {
		h := heads[node]
		if h.Seq != w.seq || h.Content != w.content || string(h.Body) != w.body || !h.Expires.Equal(sent.Add(time.Hour)) {
			t.Errorf("%s: %+v, want seq %d content %q body %q", node, h, w.seq, w.content, w.body)
		}
	}
	db.Close()
	if _, err := db.DeclarationHeads(ctx, []string{"alpha"}); err == nil {
		t.Fatal("a read of a closed store returned no error")
	}
}

// TestRecordReports: a batch of reports is recorded in order; an applied
// one moves its node's applied sequence and what it serves; one of a node
// that is gone, or whose sequence does not fit, is its own failure.
func TestRecordReports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openTemp(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, n := range []string{"alpha", "beta"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0.1", NKey: "U" + n, Joined: at}); err != nil {
			t.Fatal(err)
		}
		if err := db.RecordDeclaration(ctx, store.Declaration{Node: n, Seq: 3, Body: []byte(`{"n":"` + n + `"}`), Sig: []byte("s"), Content: "c", Sent: at, Expires: at.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	rep := func(node string, seq uint64, applied bool) store.ReportRecord {
		return store.ReportRecord{Report: store.Report{Node: node, Seq: seq, Body: []byte(`{"seq":` + strconv.FormatUint(seq, 10) + `}`), Received: at}, Applied: applied}
	}
	failed, err := db.RecordReports(ctx, []store.ReportRecord{rep("alpha", 2, true), rep("gone", 1, true), rep("alpha", 3, true), rep("beta", 3, false), rep("beta", 1<<63, true)})
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 2 || !errors.Is(failed[1], store.ErrNotFound) || !strings.Contains(fmt.Sprint(failed[4]), "above 2^63-1") {
		t.Fatalf("failed %v, want 1 (not found) and 4 (too large)", failed)
	}
	for node, w := range map[string]struct {
		seq, applied uint64
		received     bool
	}{"alpha": {3, 3, true}, "beta": {3, 0, false}} {
		r, err := db.LastReport(ctx, node)
		if err != nil || r.Seq != w.seq {
			t.Errorf("%s: last report %+v, %v; want %d", node, r, err, w.seq)
		}
		n, err := db.Node(ctx, node)
		if err != nil || n.AppliedSeq != w.applied {
			t.Errorf("%s: applied %d, %v; want %d", node, n.AppliedSeq, err, w.applied)
		}
		_, err = db.LastReceived(ctx, node)
		if (err == nil) != w.received {
			t.Errorf("%s: last received: %v, want received %v", node, err, w.received)
		}
	}
}

// TestNodesNamed: the nodes asked for that exist, by name, in one read.
func TestNodesNamed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openTemp(t)
	for _, n := range []string{"alpha", "beta", "gamma"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0.1", NKey: "U" + n, Joined: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := db.NodesNamed(ctx, []string{"gamma", "alpha", "nobody"})
	if err != nil || len(got) != 2 || got["alpha"].NKey != "Ualpha" || got["gamma"].Name != "gamma" {
		t.Fatalf("%+v, %v; want alpha and gamma", got, err)
	}
	db.Close()
	if _, err := db.NodesNamed(ctx, []string{"alpha"}); err == nil {
		t.Fatal("a read of a closed store returned no error")
	}
}

// TestFailedReports: a node whose last report failed is named with that
// report's sequence until a report that did not fail replaces it.
func TestFailedReports(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := openTemp(t)
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, n := range []string{"alpha", "beta"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0.1", NKey: "U" + n, Joined: at}); err != nil {
			t.Fatal(err)
		}
	}
	rep := func(node string, seq uint64, failed bool) store.ReportRecord {
		return store.ReportRecord{Report: store.Report{Node: node, Seq: seq, Body: []byte(`{}`), Received: at}, Applied: true, Failed: failed}
	}
	for _, step := range []struct {
		name    string
		reports []store.ReportRecord
		want    map[string]uint64
	}{
		{"none failed", []store.ReportRecord{rep("alpha", 1, false), rep("beta", 1, false)}, map[string]uint64{}},
		{"alpha failed", []store.ReportRecord{rep("alpha", 2, true)}, map[string]uint64{"alpha": 2}},
		{"beta failed too", []store.ReportRecord{rep("beta", 2, true)}, map[string]uint64{"alpha": 2, "beta": 2}},
		{"alpha applied again", []store.ReportRecord{rep("alpha", 3, false)}, map[string]uint64{"beta": 2}},
	} {
		if _, err := db.RecordReports(ctx, step.reports); err != nil {
			t.Fatal(err)
		}
		got, err := db.FailedReports(ctx)
		if err != nil || !maps.Equal(got, step.want) {
			t.Fatalf("%s: %v, %v; want %v", step.name, got, err, step.want)
		}
	}
	db.Close()
	if _, err := db.FailedReports(ctx); err == nil {
		t.Fatal("a read of a closed store returned no error")
	}
}
