package host

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/chacha20poly1305"
)

// How long a lock in the edges' storage holds without its holder renewing
// it, and how often a waiter looks again.
const (
	edgeLockTTL  = 30 * time.Second
	edgeLockPoll = 500 * time.Millisecond
)

// edgeStore is certmagic's Storage on the bus: the key-value bucket every
// edge shares (spec.EdgeBucket), so that edges obtain each name once and
// serve the same certificate, and answer each other's HTTP-01 challenges.
// Every value is sealed under the mesh's edge storage key, which only
// edges hold, bound to its key: the bucket on the controller's disk holds
// no private key in the clear. Keys (certificate names) are not secret.
//
// A storage key is a path of components joined by '/'; in the bucket each
// component is escaped (escapeComponent) and they are joined by '.', the
// bucket's token separator, so that a prefix is a subject filter. Values
// are under "v.", locks under "l.".
type edgeStore struct {
	kv    jetstream.KeyValue
	key   *seal.RestKey
	owner string // this storage's locks are marked with it

	ttl, poll time.Duration

	mu   sync.Mutex
	held map[string]*heldLock // by lock name
}

// heldLock is a lock this storage holds: its revision in the bucket, and
// the stop of the renewing that keeps it fresh.
type heldLock struct {
	revision uint64
	stop     chan struct{}
	done     chan struct{}
}

// edgeLockValue is what a lock holds: who holds it and until when it holds
// without being renewed.
type edgeLockValue struct {
	Owner   string    `json:"owner"`
	Expires time.Time `json:"expires"`
}

// openEdgeStore is the edges' storage in the bucket over nc, its values
// sealed under key (spec.EdgeStorageKeySize raw bytes).
func openEdgeStore(ctx context.Context, nc *nats.Conn, key []byte) (*edgeStore, error) {
	rk, err := seal.NewRestKey(key)
	if err != nil {
		return nil, fmt.Errorf("the edge storage key: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("open the edges' storage: %w", err)
	}
	kv, err := js.KeyValue(ctx, spec.EdgeBucket)
	if err != nil {
		return nil, fmt.Errorf("open the edges' storage, bucket %s: %w", spec.EdgeBucket, err)
	}
	return &edgeStore{kv: kv, key: rk, owner: nats.NewInbox()[len(nats.InboxPrefix):], ttl: edgeLockTTL, poll: edgeLockPoll, held: map[string]*heldLock{}}, nil
}

var _ certmagic.Storage = (*edgeStore)(nil)

// escapeComponent is c with every byte but [-_a-zA-Z0-9] as =XX (hex),
// and an empty c as "=": a bucket token, which no other component
// escapes to.
func escapeComponent(c string) string {
	if c == "" {
		return "="
	}
	var b strings.Builder
	for i := 0; i < len(c); i++ {
		ch := c[i]
		if ch == '-' || ch == '_' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' {
			b.WriteByte(ch)
			continue
		}
		fmt.Fprintf(&b, "=%02X", ch)
	}
	return b.String()
}

// unescapeComponent undoes escapeComponent.
func unescapeComponent(t string) (string, error) {
	if t == "=" {
		return "", nil
	}
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] != '=' {
			b.WriteByte(t[i])
			continue
		}
		if i+3 > len(t) {
			return "", fmt.Errorf("bucket key token %q: a cut escape", t)
		}
		v, err := hex.DecodeString(t[i+1 : i+3])
		if err != nil {
			return "", fmt.Errorf("bucket key token %q: %w", t, err)
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String(), nil
}

// bucketKey is where key is in the bucket under prefix ("v" or "l").
func bucketKey(prefix, key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = escapeComponent(p)
	}
	return prefix + "." + strings.Join(parts, ".")
}

// storageKey is the storage key of a value's bucket key.
func storageKey(k string) (string, error) {
	rest, ok := strings.CutPrefix(k, "v.")
	if !ok {
		return "", fmt.Errorf("bucket key %q is not a value's", k)
	}
	parts := strings.Split(rest, ".")
	for i, p := range parts {
		c, err := unescapeComponent(p)
		if err != nil {
			return "", err
		}
		parts[i] = c
	}
	return strings.Join(parts, "/"), nil
}

// place binds a sealed value to its key: moved to another, it does not
// open.
func (s *edgeStore) place(key string) string { return seal.Place("edge", key) }

// Store puts value at key, sealed.
func (s *edgeStore) Store(ctx context.Context, key string, value []byte) error {
	if _, err := s.kv.Put(ctx, bucketKey("v", key), s.key.Seal(value, s.place(key))); err != nil {
		return fmt.Errorf("store %s in the edges' storage: %w", key, err)
	}
	return nil
}

// Load is the value at key, opened; fs.ErrNotExist when there is none.
func (s *edgeStore) Load(ctx context.Context, key string) ([]byte, error) {
	e, err := s.kv.Get(ctx, bucketKey("v", key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("load %s from the edges' storage: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("load %s from the edges' storage: %w", key, err)
	}
	v, err := s.key.Open(e.Value(), s.place(key))
	if err != nil {
		return nil, fmt.Errorf("load %s from the edges' storage: %w", key, err)
	}
	return v, nil
}

// Delete deletes key and every key under it; none is no error.
func (s *edgeStore) Delete(ctx context.Context, key string) error {
	keys, err := s.keys(ctx, key)
	if err != nil {
		return fmt.Errorf("delete %s from the edges' storage: %w", key, err)
	}
	for _, k := range keys {
		if err := s.kv.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("delete %s from the edges' storage: %w", key, err)
		}
	}
	return nil
}

// keys are the bucket keys of the values at key and under it.
func (s *edgeStore) keys(ctx context.Context, key string) ([]string, error) {
	k := bucketKey("v", key)
	filters := []string{k, k + ".>"}
	if key == "" {
		filters = []string{"v.>"}
	}
	l, err := s.kv.ListKeysFiltered(ctx, filters...)
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, ctx.Err()
}

// Exists says whether key is a value or has values under it.
func (s *edgeStore) Exists(ctx context.Context, key string) bool {
	keys, err := s.keys(ctx, key)
	return err == nil && len(keys) > 0
}

// List is the keys under path: all of them when recursive, else those
// one component below it (values and directories).
func (s *edgeStore) List(ctx context.Context, path string, recursive bool) ([]string, error) {
	path = strings.Trim(path, "/")
	keys, err := s.keys(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("list %s in the edges' storage: %w", path, err)
	}
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		name, err := storageKey(k)
		if err != nil {
			return nil, fmt.Errorf("list %s in the edges' storage: %w", path, err)
		}
		rest := name
		if path != "" {
			var ok bool
			if rest, ok = strings.CutPrefix(name, path+"/"); !ok {
				continue // path itself, a value
			}
		}
		if !recursive {
			rest, _, _ = strings.Cut(rest, "/")
		}
		full := rest
		if path != "" {
			full = path + "/" + rest
		}
		if !seen[full] {
			seen[full] = true
			out = append(out, full)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("list %s in the edges' storage: %w", path, fs.ErrNotExist)
	}
	slices.Sort(out)
	return out, nil
}

// Stat is what the storage knows of key: a value's size (opened) and when
// it was stored, or a directory.
func (s *edgeStore) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	e, err := s.kv.Get(ctx, bucketKey("v", key))
	switch {
	case err == nil:
		size := int64(len(e.Value())) - int64(chacha20poly1305.NonceSizeX+chacha20poly1305.Overhead)
		return certmagic.KeyInfo{Key: key, Modified: e.Created(), Size: max(size, 0), IsTerminal: true}, nil
	case !errors.Is(err, jetstream.ErrKeyNotFound):
		return certmagic.KeyInfo{}, fmt.Errorf("stat %s in the edges' storage: %w", key, err)
	}
	if s.Exists(ctx, key) {
		return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
	}
	return certmagic.KeyInfo{}, fmt.Errorf("stat %s in the edges' storage: %w", key, fs.ErrNotExist)
}

// String names the storage in certmagic's logs.
func (s *edgeStore) String() string { return "the edges' storage (bucket " + spec.EdgeBucket + ")" }

// edgeShare is what an edge needs to keep its certificates in the edges'
// bucket: the host's bus connection, and its sealing key to open the
// storage key its resource carries.
type edgeShare struct {
	nc   *nats.Conn
	seal *seal.NodeKey
}

// share has the edge keep its certificates in the edges' bucket over nc
// whenever its resource carries the storage key, sealed to key.
func (g *edge) share(nc *nats.Conn, key *seal.NodeKey) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shared = edgeShare{nc: nc, seal: key}
}

// storage is where the edge e keeps its ACME account and certificates:
// the edges' bucket over the host's own directory (edgeLayered) when e
// carries the storage key and the host has the bus and its sealing key,
// else the host's own directory. The bucket is opened on first use, so
// the edge starts with the bus down.
func (g *edge) storage(e spec.EdgeSpec) (certmagic.Storage, error) {
	g.mu.Lock()
	sh := g.shared
	g.mu.Unlock()
	if e.StorageKey == "" || sh.nc == nil || sh.seal == nil {
		return &certmagic.FileStorage{Path: g.dir}, nil
	}
	key, err := sh.seal.Open(e.StorageKey)
	if err != nil {
		return nil, fmt.Errorf("edge %q: open its storage key: %w", e.Name, err)
	}
	if _, err := seal.NewRestKey(key); err != nil {
		return nil, fmt.Errorf("edge %q: the edge storage key: %w", e.Name, err)
	}
	return newEdgeLayered(g.dir, sh.nc, key, g.log.With("edge", e.Name)), nil
}
