package store_test

import (
	"context"
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
