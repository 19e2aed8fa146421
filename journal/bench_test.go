package journal_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/store"
)

// auditWriter is the store's Audit write, made directly or through the
// log.
type auditWriter interface {
	Audit(context.Context, store.AuditEntry) error
}

// benchWrites times writes of one audit entry each, by writers at once.
func benchWrites(b *testing.B, w auditWriter, writers int) {
	ctx := context.Background()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	var n atomic.Int64
	b.SetParallelism(writers)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			e := store.AuditEntry{At: at, Operator: "op", Verb: fmt.Sprint("v", n.Add(1)), Args: "{}", Outcome: "ok"}
			if err := w.Audit(ctx, e); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkJournalWrite times a write through the log (appended, then
// applied to the view) against the same write made to the store
// directly, by one writer and by several at once (GOMAXPROCS times the
// parallelism).
func BenchmarkJournalWrite(b *testing.B) {
	for _, writers := range []int{1, 8} {
		b.Run(fmt.Sprintf("journal/writers=%d", writers), func(b *testing.B) {
			dir := b.TempDir()
			v, _ := running(b, filepath.Join(dir, "mesh.db"), startBus(b, filepath.Join(dir, "js")))
			benchWrites(b, v, writers)
		})
		b.Run(fmt.Sprintf("store/writers=%d", writers), func(b *testing.B) {
			db, err := store.Open(context.Background(), filepath.Join(b.TempDir(), "mesh.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { db.Close() })
			benchWrites(b, db, writers)
		})
	}
}

// BenchmarkJournalWriteDeclarations times a push's record of what it
// sends, 1,200 declarations of 2.5 KB in one write, through the log
// against the store directly.
func BenchmarkJournalWriteDeclarations(b *testing.B) {
	ctx := context.Background()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, via := range []string{"journal", "store"} {
		b.Run(via, func(b *testing.B) {
			dir := b.TempDir()
			path := filepath.Join(dir, "mesh.db")
			db, err := store.Open(ctx, path)
			if err != nil {
				b.Fatal(err)
			}
			var ds []store.Declaration
			for i := range 1200 {
				name := fmt.Sprintf("n%04d", i)
				if err := db.AddNode(ctx, store.Node{Name: name, Address: "10.0.0.1", NKey: "U" + name, Joined: at}); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, store.Declaration{Node: name, Body: []byte(strings.Repeat("x", 2500)), Sig: make([]byte, 64), Sent: at, Expires: at})
			}
			var w interface {
				RecordDeclarations(context.Context, []store.Declaration) (map[string]error, error)
			} = db
			if via == "journal" {
				db.Close()
				w, _ = running(b, path, startBus(b, filepath.Join(dir, "js")))
			} else {
				b.Cleanup(func() { db.Close() })
			}
			b.ResetTimer()
			for i := range b.N {
				for k := range ds {
					ds[k].Seq = uint64(i + 1)
				}
				if _, err := w.RecordDeclarations(ctx, ds); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
