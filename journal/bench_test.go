package journal_test

import (
	"context"
	"fmt"
	"path/filepath"
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
