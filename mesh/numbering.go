package mesh

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// numberer numbers the declarations sent to nodes.
type numberer struct {
	db  Store
	now func() time.Time
	// claims are the sequences nodes claim above the last sent to them.
	claims *claimBook
}

// next is node's next declaration, without its content (see numbered).
func (nb *numberer) next(ctx context.Context, node string, ttl time.Duration) (spec.Declaration, error) {
	last, n, err := nb.sendState(ctx, node)
	if err != nil {
		return spec.Declaration{}, err
	}
	return nb.numbered(ctx, n, last.Seq, ttl)
}

// sendState is what sending node a declaration reads: its last declaration
// (the zero one when none was sent) and its row. A node removed, or being
// removed, is refused as the caller's mistake; a read that failed is an
// error, never "nothing was sent before".
func (nb *numberer) sendState(ctx context.Context, node string) (store.Declaration, store.Node, error) {
	last, err := nb.db.LastDeclaration(ctx, node)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.Declaration{}, store.Node{}, fmt.Errorf("read the last declaration of node %q: %w", node, err)
	}
	n, err := nb.db.Node(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return store.Declaration{}, store.Node{}, callerError(fmt.Sprintf("node %q was removed: nothing was sent to it", node))
	}
	if err != nil {
		return store.Declaration{}, store.Node{}, err
	}
	if !n.Removing.IsZero() {
		return store.Declaration{}, store.Node{}, callerError(removingError(node))
	}
	return last, n, nil
}

// numbered is the next declaration to n, without its content: numbered
// max(last sent, last applied, what it claims above the last sent) + 1,
// so a restored store never wedges a host (a claim far above the last sent
// is not believed: see weigh), issued now and expiring after ttl.
func (nb *numberer) numbered(ctx context.Context, n store.Node, last uint64, ttl time.Duration) (spec.Declaration, error) {
	m, err := nb.db.Mesh(ctx)
	if err != nil {
		return spec.Declaration{}, err
	}
	now := nb.now().UTC()
	return spec.Declaration{Mesh: m.Name, Node: n.Name, Seq: max(last, believedApplied(n.AppliedSeq, last), nb.claims.ahead(n.Name)) + 1,
		Issued: now, Expires: now.Add(ttl), Protocol: spec.Protocol}, nil
}
