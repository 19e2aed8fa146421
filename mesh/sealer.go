package mesh

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// sealer seals each secret content of a node's plan (a file's content, a
// container's secret, an edge's storage key) to the node's sealing key, so a declaration (and
// the stream that keeps it) holds the value only as that node can open
// it. A content unchanged since the node's last declaration is sealed as
// it was then, so a push that changes nothing sends nothing: sealing
// afresh would change the bytes at every push.
type sealer struct {
	db  Store
	key *seal.RestKey
	// edges is the edge storage key each edge resource carries.
	edges *edgeKeyring
	// nodes are what the sealer keeps of each node, by name, for its run.
	mu    sync.Mutex
	nodes map[string]*sealedNode
}

// sealedNode is what the sealer keeps of one node while its key stays: its
// Sealer (a key agreement a node a run, not one a value: that is most of
// sealing's cost), and the sealed texts it made or found in the node's
// last declaration, by keyed digest (so a push reads no declaration to
// reuse them), at most sealedKept.
type sealedNode struct {
	pub    seal.NodePublic
	sealer *seal.Sealer
	texts  map[string]string
}

// sealedKept bounds the sealed texts kept of one node: past it, only those
// of its last plan are kept.
const sealedKept = 64

// kept is what the sealer keeps of node while its key is pub (its
// texts a copy); ok is false when it keeps nothing (the node is new to
// this run, or its key changed).
func (s *sealer) kept(name string, pub seal.NodePublic) (texts map[string]string, sl *seal.Sealer, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[name]
	if !ok || n.pub != pub {
		return nil, nil, false
	}
	return maps.Clone(n.texts), n.sealer, true
}

// keep records node's Sealer and the texts of its plan, with what was kept
// before unless that passed sealedKept.
func (s *sealer) keep(name string, pub seal.NodePublic, sl *seal.Sealer, texts map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nodes == nil {
		s.nodes = map[string]*sealedNode{}
	}
	n, ok := s.nodes[name]
	if !ok || n.pub != pub {
		n = &sealedNode{pub: pub, texts: map[string]string{}}
		s.nodes[name] = n
	}
	if sl != nil {
		n.sealer = sl
	}
	if len(n.texts)+len(texts) > sealedKept {
		n.texts = map[string]string{}
	}
	for d, t := range texts {
		n.texts[d] = t
	}
}

// sealedDigest is a secret content's keyed digest on node at path: equal
// contents at one place have equal digests, and a digest tells nothing of
// its content, nor whether two places hold the same, to whoever lacks the
// controller's key.
func (s *sealer) sealedDigest(node, path string, content []byte) string {
	return spec.SealedDigestPrefix + s.key.Digest([]byte(seal.Place("file", node, path, string(content))))
}

// mountDigest is a container's secret's keyed digest on node, at target in
// the container called name: as sealedDigest, at a place of its own.
func (s *sealer) mountDigest(node, name, target, value string) string {
	return spec.SealedDigestPrefix + s.key.Digest([]byte(seal.Place("secret", node, name, target, value)))
}

// toSeal is one secret of a plan, before it is sealed: what it is (for an
// error), its keyed digest and value, and where the sealed text goes.
type toSeal struct {
	what, digest string
	value        []byte
	done         func(text, digest string)
}

// secretsOf are plan's secrets not sealed yet, each file content and each
// container's secret, on node.
func (s *sealer) secretsOf(node string, plan Plan) []toSeal {
	var out []toSeal
	for _, r := range plan.Resources {
		switch c := r.Spec.(type) {
		case *spec.FileSpec:
			if c.Secret && c.Sealed == "" {
				out = append(out, toSeal{what: c.Path, digest: s.sealedDigest(node, c.Path, c.Content), value: c.Content,
					done: func(text, digest string) { c.Content, c.Sealed, c.Digest = nil, text, digest }})
			}
		case *spec.ContainerSpec:
			for i := range c.Secrets {
				m := &c.Secrets[i]
				if m.Sealed != "" {
					continue
				}
				out = append(out, toSeal{what: fmt.Sprintf("container %s's secret %s", c.Name, m.Target),
					digest: s.mountDigest(node, c.Name, m.Target, m.Value), value: []byte(m.Value),
					done: func(text, digest string) { m.Value, m.Sealed, m.Digest = "", text, digest }})
			}
		}
	}
	return out
}

// seal seals plan's secret files and containers' secrets for n, in place.
// A node with no sealing key is its own failure (a *ComposeError); a read
// that failed is an error, never "nothing sealed before".
func (s *sealer) seal(ctx context.Context, n store.Node, plan Plan) error {
	secret := s.secretsOf(n.Name, plan)
	edges, err := s.edgeSecrets(ctx, n.Name, plan)
	if err != nil {
		return err
	}
	secret = append(secret, edges...)
	if len(secret) == 0 {
		return nil
	}
	pub, err := seal.ParseNodePublic(n.SealKey)
	if err != nil {
		return &ComposeError{Node: n.Name, Reason: fmt.Sprintf("its host holds no sealing key to seal %s to (%v): remove the node and join it again", secret[0].what, err)}
	}
	before, sl, ok := s.kept(n.Name, pub)
	if !ok {
		if before, err = s.sealedBefore(ctx, n.Name); err != nil {
			return err
		}
	}
	texts := make(map[string]string, len(secret))
	for _, sc := range secret {
		text, ok := before[sc.digest]
		if !ok {
			if sl == nil {
				if sl, err = seal.NewSealer(pub); err != nil {
					return fmt.Errorf("seal %s to node %q: %w", sc.what, n.Name, err)
				}
			}
			if text, err = sl.Seal(sc.value); err != nil {
				return fmt.Errorf("seal %s to node %q: %w", sc.what, n.Name, err)
			}
		}
		sc.done(text, sc.digest)
		texts[sc.digest] = text
	}
	s.keep(n.Name, pub, sl, texts)
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
		switch c := r.Spec.(type) {
		case *spec.FileSpec:
			if c.Sealed != "" {
				out[c.Digest] = c.Sealed
			}
		case *spec.ContainerSpec:
			for _, m := range c.Secrets {
				if m.Sealed != "" {
					out[m.Digest] = m.Sealed
				}
			}
		case *spec.EdgeSpec:
			if c.StorageKey != "" {
				out[c.StorageDigest] = c.StorageKey
			}
		}
	}
	return out, nil
}
