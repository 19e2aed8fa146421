package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/mesh-fleet/mesh/spec"
)

// claimBook holds the claims nodes make of sequences above the last sent.
// An applied sequence is taken only if it was sent to its node (at or
// below the last sent to it: sequences only go up): a claim above it sets
// nothing status shows as applied. One a little ahead may still be true (a
// store restored from an older copy forgot the pushes since), so the
// next declaration is numbered past it, and the host is never wedged.
type claimBook struct {
	db     Store
	log    *slog.Logger
	mu     sync.Mutex
	byNode map[string]claim
}

// claim is a sequence a node reported having applied that is above the
// last one sent to it.
type claim struct {
	claimed, sent uint64
	believed      bool // within spec.MaxSeqAhead: a restored store, numbered past
}

// weigh checks a sequence node says it applied against sent, the last one
// sent to it (0: none; the caller reads it, for a batch at once), and
// says whether it is taken as applied: only at or below sent. Above it by
// at most spec.MaxSeqAhead, the claim is kept to number the next
// declaration past (a store restored from an older copy), and named in
// status. Further above, it is the node's own failure, named in status,
// and numbers nothing.
func (cb *claimBook) weigh(node string, applied, sent uint64) (taken bool) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if applied <= sent {
		delete(cb.byNode, node)
		return true
	}
	cl := claim{claimed: applied, sent: sent, believed: applied-sent <= spec.MaxSeqAhead}
	if prev, ok := cb.byNode[node]; !ok || prev.believed != cl.believed {
		if cl.believed {
			cb.log.Warn("a node reports applying a declaration above the last sent to it: not taken as applied, numbered past (a restored store?)", "node", node, "applied", applied, "sent", sent)
		} else {
			cb.log.Warn("a node reports applying a declaration far above the last sent to it: not believed", "node", node, "applied", applied, "sent", sent)
		}
	}
	cb.byNode[node] = cl
	return false
}

// ahead is the sequence node claims above the last sent that the next
// declaration is numbered past; 0 when it claims none, or one not
// believed.
func (cb *claimBook) ahead(node string) uint64 {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cl, ok := cb.byNode[node]; ok && cl.believed {
		return cl.claimed
	}
	return 0
}

// believe is hb as it is recorded (sent being the last sequence sent to its
// node): a claim weigh does not take is replaced by the applied sequence
// kept before it, so status never shows a sequence not sent as applied.
func (cb *claimBook) believe(ctx context.Context, hb spec.Heartbeat, sent uint64) (spec.Heartbeat, error) {
	if cb.weigh(hb.Node, hb.AppliedSeq, sent) {
		return hb, nil
	}
	n, err := cb.db.Node(ctx, hb.Node)
	if err != nil {
		return hb, err
	}
	hb.AppliedSeq = n.AppliedSeq
	return hb, nil
}

// claimOf is node's claim, if it made one.
func (cb *claimBook) claimOf(node string) (claim, bool) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	cl, ok := cb.byNode[node]
	return cl, ok
}

// problem says what status shows of node's claim.
func (cl claim) problem(node string) string {
	if cl.believed {
		return fmt.Sprintf("%s reports applying declaration %d, above the last sent to it (%d): not taken as applied, as it was never sent; if this store was restored from an older copy, the next push is numbered past it",
			node, cl.claimed, cl.sent)
	}
	return fmt.Sprintf("%s reports applying declaration %d, more than %d above the last sent to it (%d): not believed, and not used to number its declarations; its host keeps another mesh's state or does not tell the truth (mesh node remove %s, then join it again)",
		node, cl.claimed, spec.MaxSeqAhead, cl.sent, node)
}

// believedApplied is the applied sequence of a stored node that numbering
// may build on: not one more than spec.MaxSeqAhead above the last sent
// (a store written before claims were checked may hold one).
func believedApplied(applied, sent uint64) uint64 {
	if applied > sent && applied-sent > spec.MaxSeqAhead {
		return 0
	}
	return applied
}
