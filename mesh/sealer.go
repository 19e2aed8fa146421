package mesh

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// sealer seals each secret content of a node's plan to the node's sealing
// key, so a declaration (and the stream that keeps it) holds the value only
// as that node can open it. A content unchanged since the node's last
// declaration is sealed as it was then, so a push that changes nothing
// sends nothing: sealing afresh would change the bytes at every push.
type sealer struct {
	db  Store
	key *seal.RestKey
	// sealers are the Sealer of each node, by name: a key agreement a node
	// a run, not one a value (it is most of sealing's cost). One made for
	// a key the node no longer has is made again.
	mu      sync.Mutex
	sealers map[string]*seal.Sealer
}

// sealerFor is node's Sealer to pub.
func (s *sealer) sealerFor(node string, pub seal.NodePublic) (*seal.Sealer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl, ok := s.sealers[node]; ok && sl.To() == pub {
		return sl, nil
	}
	sl, err := seal.NewSealer(pub)
	if err != nil {
		return nil, err
	}
	if s.sealers == nil {
		s.sealers = map[string]*seal.Sealer{}
	}
	s.sealers[node] = sl
	return sl, nil
}

// sealedDigest is a secret content's keyed digest on node at path: equal
// contents at one place have equal digests, and a digest tells nothing of
// its content, nor whether two places hold the same, to whoever lacks the
// controller's key.
func (s *sealer) sealedDigest(node, path string, content []byte) string {
	return spec.SealedDigestPrefix + s.key.Digest([]byte(seal.Place("file", node, path, string(content))))
}

// seal seals plan's secret files for n, in place. A node with no sealing
// key is its own failure (a *ComposeError); a read that failed is an
// error, never "nothing sealed before".
func (s *sealer) seal(ctx context.Context, n store.Node, plan Plan) error {
	var secret []*spec.FileSpec
	for _, r := range plan.Resources {
		if f, ok := r.Spec.(*spec.FileSpec); ok && f.Secret && f.Sealed == "" {
			secret = append(secret, f)
		}
	}
	if len(secret) == 0 {
		return nil
	}
	pub, err := seal.ParseNodePublic(n.SealKey)
	if err != nil {
		return &ComposeError{Node: n.Name, Reason: fmt.Sprintf("its host holds no sealing key to seal %s to (%v): remove the node and join it again", secret[0].Path, err)}
	}
	before, err := s.sealedBefore(ctx, n.Name)
	if err != nil {
		return err
	}
	var sl *seal.Sealer
	for _, f := range secret {
		digest := s.sealedDigest(n.Name, f.Path, f.Content)
		text, ok := before[digest]
		if !ok {
			if sl == nil {
				if sl, err = s.sealerFor(n.Name, pub); err != nil {
					return fmt.Errorf("seal %s to node %q: %w", f.Path, n.Name, err)
				}
			}
			if text, err = sl.Seal(f.Content); err != nil {
				return fmt.Errorf("seal %s to node %q: %w", f.Path, n.Name, err)
			}
		}
		f.Content, f.Sealed, f.Digest = nil, text, digest
	}
	return nil
}

// sealedBefore is what node's last declaration holds sealed, by digest.
func (s *sealer) sealedBefore(ctx context.Context, node string) (map[string]string, error) {
	last, err := s.db.LastDeclaration(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the last declaration of node %q: %w", node, err)
	}
	var d spec.Declaration
	if err := spec.Decode(last.Body, &d); err != nil {
		return nil, fmt.Errorf("read the last declaration of node %q: %w", node, err)
	}
	out := map[string]string{}
	for _, r := range d.Resources {
		if f, ok := r.Spec.(*spec.FileSpec); ok && f.Sealed != "" {
			out[f.Digest] = f.Sealed
		}
	}
	return out, nil
}
