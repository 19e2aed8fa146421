package mesh

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go/jetstream"
)

// ensureEdgeBucket creates the bucket the edges share (spec.EdgeBucket):
// one value a key (a certificate replaced leaves no copy), on disk, kept
// by as many servers as the declaration stream.
func ensureEdgeBucket(ctx context.Context, js jetstream.JetStream, replicas int) error {
	replicas, err := keptReplicas(ctx, js, "KV_"+spec.EdgeBucket, replicas)
	if err != nil {
		return err
	}
	_, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      spec.EdgeBucket,
		Description: "the edges' ACME account, certificates, challenges and locks, each value sealed under the edge storage key",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", spec.EdgeBucket, err)
	}
	return nil
}

// edgeKeyPlace is where the edge storage key is kept: its sealed text
// opens there only.
var edgeKeyPlace = seal.Place("edge storage key")

// edgeKeyring is the mesh's edge storage key: made once, the first time
// an edge is composed, and kept in the store sealed under the at-rest key.
type edgeKeyring struct {
	db  Store
	key *seal.RestKey
	now func() time.Time

	mu  sync.Mutex
	raw []byte // nil until read or made
}

// get is the edge storage key, made and kept if the store keeps none.
func (k *edgeKeyring) get(ctx context.Context) ([]byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.raw != nil {
		return k.raw, nil
	}
	text, err := k.db.EdgeStorageKey(ctx)
	if errors.Is(err, store.ErrNotFound) {
		raw := make([]byte, spec.EdgeStorageKeySize)
		rand.Read(raw) // never fails: crypto/rand ends the program instead
		text, err = k.db.KeepEdgeStorageKey(ctx, k.key.SealText(string(raw), edgeKeyPlace), k.now())
	}
	if err != nil {
		return nil, fmt.Errorf("the edge storage key: %w", err)
	}
	raw, err := k.key.OpenText(text, edgeKeyPlace)
	if err != nil {
		return nil, fmt.Errorf("the edge storage key: %w (is D/controller/%s the key that sealed it?)", err, SealKeyFile)
	}
	if len(raw) != spec.EdgeStorageKeySize {
		return nil, fmt.Errorf("the edge storage key: %d bytes, want %d", len(raw), spec.EdgeStorageKeySize)
	}
	k.raw = []byte(raw)
	return k.raw, nil
}

// declaresEdge says whether m declares an edge resource.
func declaresEdge(m spec.Module) bool {
	for _, r := range m.Resources {
		if r.Kind == spec.KindEdge {
			return true
		}
	}
	return false
}

// edgeNodes are the nodes assigned a module that declares an edge: those
// the bus lets use the edges' bucket. Assignments are read as the store
// keeps them, their secret values never opened.
func edgeNodes(ctx context.Context, db Store) (map[string]bool, error) {
	if s, ok := db.(*sealedStore); ok {
		db = s.Store
	}
	mods, err := db.Modules(ctx)
	if err != nil {
		return nil, err
	}
	edges := map[string]bool{}
	for _, m := range mods {
		if declaresEdge(m.Module) {
			edges[m.Module.Name] = true
		}
	}
	if len(edges) == 0 {
		return nil, nil
	}
	as, err := db.Assignments(ctx)
	if err != nil {
		return nil, err
	}
	nodes := map[string]bool{}
	for _, a := range as {
		if edges[a.Module] {
			nodes[a.Node] = true
		}
	}
	return nodes, nil
}

// edgesChanged gives the bus its users anew when a change touched an edge
// (changed): a node assigned an edge may use the edges' bucket from now,
// one unassigned may not. A failure is logged; the sweep gives them again.
func (cat *catalogue) edgesChanged(ctx context.Context, changed bool) {
	if !changed || cat.usersChanged == nil {
		return
	}
	if err := cat.usersChanged(ctx); err != nil {
		cat.log.Error("bus users not given anew after a change of the edges; the sweep gives them again", "err", err)
	}
}

// isEdgeModule says whether the module called name declares an edge; one
// that cannot be read is taken to (its users are given anew for nothing).
func (cat *catalogue) isEdgeModule(ctx context.Context, name string) bool {
	m, err := cat.db.Module(ctx, name)
	return err != nil && !errors.Is(err, store.ErrNotFound) || err == nil && declaresEdge(m.Module)
}

// edgeSecrets are the storage keys of plan's edges not sealed yet, on
// node: each edge carries the mesh's edge storage key, sealed to its node
// as a secret is, under a keyed digest of its own place.
func (s *sealer) edgeSecrets(ctx context.Context, node string, plan Plan) ([]toSeal, error) {
	var out []toSeal
	for _, r := range plan.Resources {
		e, ok := r.Spec.(*spec.EdgeSpec)
		if !ok || e.StorageKey != "" {
			continue
		}
		raw, err := s.edges.get(ctx)
		if err != nil {
			return nil, fmt.Errorf("seal edge %s's storage key to node %q: %w", e.Name, node, err)
		}
		digest := spec.SealedDigestPrefix + s.key.Digest([]byte(seal.Place("edge", node, e.Name, string(raw))))
		out = append(out, toSeal{what: "edge " + e.Name + "'s storage key", digest: digest, value: raw,
			done: func(text, digest string) { e.StorageKey, e.StorageDigest = text, digest }})
	}
	return out, nil
}
