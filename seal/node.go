package seal

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"golang.org/x/crypto/curve25519"
	"golang.org/x/crypto/nacl/box"
)

// NodeKeyFile is where a host keeps its sealing key's private half, in its
// directory (D/host): 32 bytes, mode 0600, nothing else.
const NodeKeyFile = "seal.key"

// The text forms of a node's sealing public key and of a value sealed to
// one. The version names the construction (NaCl's anonymous box: an
// ephemeral X25519 key, XSalsa20-Poly1305), so another can come beside it.
const (
	nodePublicPrefix = "x25519:"
	nodeSealedPrefix = "sealed-node:v1:"
)

// nodeKeySize is the size of either half of a node's sealing key.
const nodeKeySize = 32

// NodePublic is the public half of a node's sealing key: what the host
// sends in its enrolment, and what the controller seals a node's secrets to.
type NodePublic [nodeKeySize]byte

// String is the public key's text form, "x25519:" and base64url.
func (p NodePublic) String() string {
	return nodePublicPrefix + base64.RawURLEncoding.EncodeToString(p[:])
}

// ParseNodePublic reads a public key's text form, as String writes it,
// and refuses anything else.
func ParseNodePublic(s string) (NodePublic, error) {
	rest, ok := strings.CutPrefix(s, nodePublicPrefix)
	if !ok {
		return NodePublic{}, fmt.Errorf("sealing public key %q: want %q and base64url", clipKeyText(s), nodePublicPrefix)
	}
	raw, err := decodeText(rest)
	if err != nil {
		return NodePublic{}, fmt.Errorf("sealing public key %q: %w", clipKeyText(s), err)
	}
	if len(raw) != nodeKeySize {
		return NodePublic{}, fmt.Errorf("sealing public key %q: %d bytes, want %d", clipKeyText(s), len(raw), nodeKeySize)
	}
	var p NodePublic
	copy(p[:], raw)
	if p == (NodePublic{}) {
		return NodePublic{}, errors.New("sealing public key: all zeros")
	}
	return p, nil
}

// NodeKey is a node's sealing key pair. Its private half leaves the host
// only as the file WriteFile makes.
type NodeKey struct {
	public  NodePublic
	private [nodeKeySize]byte
	// agreed are the keys agreed with the ephemeral keys of the values
	// opened lately: a controller seals a node's values under one
	// ephemeral key a run, so opening them costs one agreement, not one a
	// value. At most agreedKept.
	mu     sync.Mutex
	agreed map[[nodeKeySize]byte]*[32]byte
}

// agreedKept bounds the agreements a NodeKey remembers.
const agreedKept = 16

// agreement is the key agreed between this key and epk, made once.
func (k *NodeKey) agreement(epk [nodeKeySize]byte) *[32]byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	if shared, ok := k.agreed[epk]; ok {
		return shared
	}
	if k.agreed == nil || len(k.agreed) >= agreedKept {
		k.agreed = map[[nodeKeySize]byte]*[32]byte{}
	}
	shared := new([32]byte)
	box.Precompute(shared, &epk, &k.private)
	k.agreed[epk] = shared
	return shared
}

// GenerateNodeKey makes a new sealing key pair.
func GenerateNodeKey() (*NodeKey, error) {
	pub, priv, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate a sealing key: %w", err)
	}
	return &NodeKey{public: *pub, private: *priv}, nil
}

// Public is the key's public half.
func (k *NodeKey) Public() NodePublic { return k.public }

// WriteFile writes the private half to path, mode 0600. A file already
// there is refused: a key is made once, at join, and a rejoin makes its
// own in a fresh directory.
func (k *NodeKey) WriteFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write sealing key: %w", err)
	}
	if _, err := f.Write(k.private[:]); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("write sealing key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("write sealing key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("write sealing key %s: %w", path, err)
	}
	return nil
}

// LoadNodeKey reads a sealing key's private half from path, and derives
// its public half. A file readable by anyone but its owner, or not of the
// key's size, is refused.
func LoadNodeKey(path string) (*NodeKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read sealing key: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read sealing key %s: %w", path, err)
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("read sealing key %s: not a regular file", path)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("read sealing key %s: mode %04o lets others than its owner read it; want 0600 (chmod 600 %s)", path, perm, path)
	}
	if info.Size() != nodeKeySize {
		return nil, fmt.Errorf("read sealing key %s: %d bytes, want %d", path, info.Size(), nodeKeySize)
	}
	k := new(NodeKey)
	if _, err := io.ReadFull(f, k.private[:]); err != nil {
		return nil, fmt.Errorf("read sealing key %s: %w", path, err)
	}
	pub, err := curve25519.X25519(k.private[:], curve25519.Basepoint)
	if err != nil {
		return nil, fmt.Errorf("read sealing key %s: %w", path, err)
	}
	copy(k.public[:], pub)
	return k, nil
}

// Sealer seals values to one node under one ephemeral key pair: the
// X25519 agreement with the node's key is made once, when the Sealer is
// made, and each value is sealed under the key it gives (XSalsa20-Poly1305,
// a random 24-byte nonce a value). A controller keeps a Sealer a node, so
// sealing a node's values costs no key agreement after the first.
type Sealer struct {
	pub    NodePublic
	epk    [nodeKeySize]byte // the ephemeral public key, sent with each value
	shared [32]byte          // box.Precompute of the ephemeral private key and pub
}

// sealedOverhead is what sealing adds to a value: the ephemeral public key,
// the nonce and the tag.
const sealedOverhead = nodeKeySize + 24 + box.Overhead

// NewSealer makes a Sealer to the node whose public key is pub.
func NewSealer(pub NodePublic) (*Sealer, error) {
	epk, esk, err := box.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make an ephemeral key to seal to %s: %w", pub, err)
	}
	s := &Sealer{pub: pub, epk: *epk}
	p := [nodeKeySize]byte(pub)
	box.Precompute(&s.shared, &p, esk)
	return s, nil
}

// To is the node the Sealer seals to.
func (s *Sealer) To() NodePublic { return s.pub }

// Seal seals plaintext to the Sealer's node: only the holder of its
// private half can open it. The text form is "sealed-node:v1:" and
// base64url of the ephemeral public key, the nonce and the box.
func (s *Sealer) Seal(plaintext []byte) (string, error) {
	out := make([]byte, nodeKeySize+24, sealedOverhead+len(plaintext))
	copy(out, s.epk[:])
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", fmt.Errorf("seal to %s: %w", s.pub, err)
	}
	copy(out[nodeKeySize:], nonce[:])
	out = box.SealAfterPrecomputation(out, plaintext, &nonce, &s.shared)
	return nodeSealedPrefix + base64.RawURLEncoding.EncodeToString(out), nil
}

// SealTo seals plaintext to the node whose public key is pub, under a key
// pair of its own (NewSealer, then Seal).
func SealTo(pub NodePublic, plaintext []byte) (string, error) {
	s, err := NewSealer(pub)
	if err != nil {
		return "", err
	}
	return s.Seal(plaintext)
}

// decodeSealed reads a sealed value's text form into its box.
func decodeSealed(text string) ([]byte, error) {
	rest, ok := strings.CutPrefix(text, nodeSealedPrefix)
	if !ok {
		return nil, fmt.Errorf("sealed value %q: want %q and base64url", clipKeyText(text), nodeSealedPrefix)
	}
	raw, err := decodeText(rest)
	if err != nil {
		return nil, fmt.Errorf("sealed value %q: %w", clipKeyText(text), err)
	}
	if len(raw) < sealedOverhead {
		return nil, fmt.Errorf("sealed value %q: %d bytes, shorter than a sealed box (%d)", clipKeyText(text), len(raw), sealedOverhead)
	}
	return raw, nil
}

// Open opens a value sealed to this key. A value sealed to another key, or
// changed since, is refused.
func (k *NodeKey) Open(text string) ([]byte, error) {
	raw, err := decodeSealed(text)
	if err != nil {
		return nil, err
	}
	epk, nonce := [nodeKeySize]byte(raw[:nodeKeySize]), [24]byte(raw[nodeKeySize:nodeKeySize+24])
	plain, ok := box.OpenAfterPrecomputation(nil, raw[nodeKeySize+24:], &nonce, k.agreement(epk))
	if !ok {
		return nil, fmt.Errorf("open sealed value: it was not sealed to %s, or it was changed since", k.public)
	}
	if plain == nil {
		plain = []byte{}
	}
	return plain, nil
}

// decodeText reads base64url without padding, in its one form: the
// decoder skips line breaks, and a text that says the same bytes two ways
// is refused.
func decodeText(s string) ([]byte, error) {
	if strings.ContainsAny(s, "\r\n") {
		return nil, errors.New("a line break in base64url")
	}
	return base64.RawURLEncoding.Strict().DecodeString(s)
}

// clipKeyText is s cut short for an error message.
func clipKeyText(s string) string {
	const most = 64
	if len(s) <= most {
		return s
	}
	return s[:most] + "..."
}
