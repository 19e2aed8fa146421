package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// busyAuditStore is the real store but for audit writes, the first
// `refuse` of which fail as SQLite does when another writer holds the
// store: the seam where the store is busy.
type busyAuditStore struct {
	*store.DB
	refuse *atomic.Int32
}

func (s busyAuditStore) Audit(ctx context.Context, e store.AuditEntry) error {
	if s.refuse.Add(-1) >= 0 {
		return fmt.Errorf("record audit entry for %s: database is locked (5) (SQLITE_BUSY): %w", e.Verb, store.ErrBusy)
	}
	return s.DB.Audit(ctx, e)
}

// TestBusyStoreLosesNoAudit: operator calls made while the store refuses
// audit writes (busy) are all audited once it takes them, in the order they
// were made, the failed call with its failure.
func TestBusyStoreLosesNoAudit(t *testing.T) {
	t.Parallel()
	refuse := new(atomic.Int32)
	refuse.Store(3) // the first call's write, and the retries after it
	c, db := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store {
		return busyAuditStore{DB: db, refuse: refuse}
	})
	op := operatorConn(t, c)
	call := func(verb string, req any) spec.Reply {
		t.Helper()
		m, err := op.Request(spec.APIPrefix+verb, mustJSON(t, req), 10*time.Second)
		if err != nil {
			t.Fatalf("%s: no answer: %v", verb, err)
		}
		var r spec.Reply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A call that fails, then one that succeeds, while audits are refused.
	if r := call(spec.NodeShow.Name, spec.NodeShowRequest{Name: "ghost"}); !strings.Contains(r.Error, "no node called") {
		t.Fatalf("node show ghost: %+v", r)
	}
	if r := call(spec.NodeHold.Name, spec.HoldRequest{Node: "alpha", Hold: true, Reason: "busy test"}); r.Error != "" {
		t.Fatalf("node hold: %s", r.Error)
	}
	var got []string
	poll.Until(t, 10*time.Second, "both calls audited after the store took writes again", func() error {
		es, err := db.AuditSince(context.Background(), time.Time{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, e := range es {
			got = append(got, e.Verb+" "+e.Outcome)
		}
		if len(got) == 2 {
			return nil
		}
		return fmt.Errorf("audited %q", got)
	})
	if !strings.HasPrefix(got[0], spec.NodeShow.Name+` failed: no node called "ghost"`) || got[1] != spec.NodeHold.Name+" ok" {
		t.Fatalf("audited %q, want the failed node.show then the hold", got)
	}
	// The queue's count falls once the write that emptied it returns, a
	// moment after the rows are readable.
	poll.Until(t, 10*time.Second, "the audit queue empty", func() error {
		n := c.auditor.auditQueued()
		if n == 0 {
			return nil
		}
		return fmt.Errorf("%d entries still queued", n)
	})
}
