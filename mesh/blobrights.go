package mesh

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// blobRights are the blobs each node's last declaration carries, read from
// its stored declaration once per send: a blob is fetched in many chunks,
// each asking again.
type blobRights struct {
	mu     sync.Mutex
	byNode map[string]carried
}

// carried is the blobs one sent declaration carries.
type carried struct {
	seq     uint64
	sent    time.Time // with seq, which send: a node removed and joined again numbers from 1 anew
	digests map[string]bool
}

// of is the digests of the blobs d carries, as its resources declare them
// (a file's content, a container's image archive): never a digest that
// merely appears in it.
func (b *blobRights) of(d store.Declaration) (map[string]bool, error) {
	b.mu.Lock()
	c, ok := b.byNode[d.Node]
	b.mu.Unlock()
	if ok && c.seq == d.Seq && c.sent.Equal(d.Sent) {
		return c.digests, nil
	}
	var decl spec.Declaration
	if err := spec.Decode(d.Body, &decl); err != nil {
		return nil, fmt.Errorf("read node %q's declaration %d: %w", d.Node, d.Seq, err)
	}
	digests := map[string]bool{}
	for _, r := range decl.Resources {
		for _, blob := range r.Spec.Blobs() {
			digests[blob.Digest] = true
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byNode == nil {
		b.byNode = map[string]carried{}
	}
	b.byNode[d.Node] = carried{seq: d.Seq, sent: d.Sent, digests: digests}
	return digests, nil
}

// mayFetch refuses node a blob its last declaration does not carry.
func (bs *blobs) mayFetch(ctx context.Context, node, digest string) error {
	d, err := bs.db.LastDeclaration(ctx, node)
	if err != nil {
		return fmt.Errorf("blob %s: %w", digest, err)
	}
	digests, err := bs.rights.of(d)
	if err != nil {
		return fmt.Errorf("blob %s: %w", digest, err)
	}
	if !digests[digest] {
		return refusedError(fmt.Sprintf("blob %s is not in node %q's declaration", digest, node))
	}
	return nil
}
