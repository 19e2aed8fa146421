package store_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// BenchmarkRecordHeartbeat is one heartbeat's write: one transaction,
// synchronous=FULL. A controller receives one per node every 10 s.
func BenchmarkRecordHeartbeat(b *testing.B) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(b.TempDir(), "mesh.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if err := db.AddNode(ctx, store.Node{Name: "alpha", Address: "127.0.0.1", NKey: "UA", Joined: time.Now()}); err != nil {
		b.Fatal(err)
	}
	hb := spec.Heartbeat{Node: "alpha", HostVersion: "abc", Protocol: spec.Protocol}
	for b.Loop() {
		if err := db.RecordHeartbeat(ctx, hb, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNodes reads 200 nodes, as node list does on a large fleet.
func BenchmarkNodes(b *testing.B) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(b.TempDir(), "mesh.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for i := range 200 {
		n := store.Node{Name: "n" + string(rune('a'+i%26)) + time.Duration(i).String(), Address: "127.0.0.1", NKey: "U" + time.Duration(i).String(), Joined: time.Now()}
		if err := db.AddNode(ctx, n); err != nil {
			b.Fatal(err)
		}
		db.RecordFacts(ctx, spec.Facts{Node: n.Name, Arch: "amd64", Kernel: "6.1"}, time.Now())
	}
	for b.Loop() {
		if _, err := db.Nodes(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeclarationHeads reads the heads of 100 of 2,000 nodes, as a
// batch of heartbeats or reports does: each node was sent a declaration of
// 1.2 KB and applied it, so its row holds the body twice.
func BenchmarkDeclarationHeads(b *testing.B) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(b.TempDir(), "mesh.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	const nodes = 2000
	body := bytes.Repeat([]byte("x"), 1200)
	names := make([]string, nodes)
	ds := make([]store.Declaration, nodes)
	rs := make([]store.ReportRecord, nodes)
	now := time.Now()
	for i := range names {
		names[i] = fmt.Sprintf("n%d", i)
		if err := db.AddNode(ctx, store.Node{Name: names[i], Address: "127.0.0.1", NKey: "U" + names[i], Joined: now}); err != nil {
			b.Fatal(err)
		}
		ds[i] = store.Declaration{Node: names[i], Seq: 1, Body: body, Sig: bytes.Repeat([]byte("s"), 64), Content: "sha256:c", Sent: now, Expires: now.Add(time.Hour)}
		rs[i] = store.ReportRecord{Report: store.Report{Node: names[i], Seq: 1, Body: []byte("{}"), Received: now}, Applied: true}
	}
	if _, err := db.RecordDeclarations(ctx, ds); err != nil {
		b.Fatal(err)
	}
	if _, err := db.RecordReports(ctx, rs); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		batch := make([]string, 100)
		for j := range batch {
			batch[j] = names[(i*7919+j*104729)%nodes]
		}
		i++
		heads, err := db.DeclarationHeads(ctx, batch)
		if err != nil || len(heads) == 0 {
			b.Fatal(len(heads), err)
		}
	}
}
