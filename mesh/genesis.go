package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nkeys"
)

// Paths of the controller's files under its directory (D/controller).
const (
	DBFile      = "mesh.db"
	SignKeyFile = "sign.key"
	SealKeyFile = "seal.key" // the at-rest key: never inside mesh.db
	CADir       = "ca"
	JSDir       = "js"
	// PutBackFile is the launcher's mark beside a store it put back: the
	// controller begins a new log of the store's writes from it.
	PutBackFile = DBFile + ".put-back"
)

// GenesisConfig is what creating a mesh needs.
type GenesisConfig struct {
	Dir     string // the controller's directory, D/controller; must not exist
	Mesh    string
	Node    string // the first node: this machine
	Address string // where other nodes reach the first node
	// SealKey is the first node's sealing public key (seal.NodePublic's
	// text): its host keeps the private half.
	SealKey string
	// WGKey is the first node's WireGuard public key (standard base64):
	// its host keeps the private half.
	WGKey string
	// Overlay is the overlay's range, turned on at creation; empty: off.
	Overlay string
	Now     time.Time
}

// Genesis is what creating a mesh hands back to the caller, who places the
// operator's and the first node's credentials.
type Genesis struct {
	OperatorSeed []byte
	NodeSeed     []byte
	Root         *x509.Certificate
	SignPub      ed25519.PublicKey
}

// Create makes a new mesh in cfg.Dir: the store (with the mesh, its operator
// and its first node recorded), the signing key, the at-rest key and the CA, whose
// intermediate is constrained to the mesh's own names (Constraints). On
// failure it removes what it made.
func Create(ctx context.Context, cfg GenesisConfig) (g Genesis, err error) {
	if err := spec.CheckName("mesh", cfg.Mesh); err != nil {
		return Genesis{}, err
	}
	if err := spec.CheckName("node", cfg.Node); err != nil {
		return Genesis{}, err
	}
	var overlay netip.Prefix
	if cfg.Overlay != "" {
		p, err := spec.CheckOverlayCIDR(cfg.Overlay)
		if err != nil {
			return Genesis{}, err
		}
		overlay = p
	}
	if cfg.WGKey != "" {
		if err := spec.CheckWGKey(cfg.WGKey); err != nil {
			return Genesis{}, err
		}
	}
	if _, err := os.Stat(cfg.Dir); err == nil {
		return Genesis{}, fmt.Errorf("%s already exists: this directory already holds a mesh", cfg.Dir)
	}
	if err := os.Mkdir(cfg.Dir, 0o700); err != nil {
		return Genesis{}, fmt.Errorf("create controller directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(cfg.Dir)
		}
	}()

	auth, err := ca.Create(filepath.Join(cfg.Dir, CADir), cfg.Mesh, cfg.Now, Constraints(nil)...)
	if err != nil {
		return Genesis{}, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Genesis{}, fmt.Errorf("generate signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return Genesis{}, fmt.Errorf("encode signing key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, SignKeyFile), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return Genesis{}, fmt.Errorf("write signing key: %w", err)
	}
	if _, err := seal.CreateRestKey(filepath.Join(cfg.Dir, SealKeyFile)); err != nil {
		return Genesis{}, err
	}

	op, err := nkeys.CreateUser()
	if err != nil {
		return Genesis{}, fmt.Errorf("generate operator key: %w", err)
	}
	node, err := nkeys.CreateUser()
	if err != nil {
		return Genesis{}, fmt.Errorf("generate node key: %w", err)
	}
	opPub, _ := op.PublicKey()
	nodePub, _ := node.PublicKey()

	db, err := store.Open(ctx, filepath.Join(cfg.Dir, DBFile))
	if err != nil {
		return Genesis{}, err
	}
	defer db.Close()
	if err := db.CreateMesh(ctx, store.Mesh{Name: cfg.Mesh, Created: cfg.Now}, store.Operator{Name: "operator", NKey: opPub}); err != nil {
		return Genesis{}, err
	}
	if err := db.AddNode(ctx, store.Node{Name: cfg.Node, Address: cfg.Address, NKey: nodePub, SealKey: cfg.SealKey, WGKey: cfg.WGKey, Joined: cfg.Now}); err != nil {
		return Genesis{}, err
	}
	if overlay.IsValid() {
		if _, err := db.EnableOverlay(ctx, overlay, cfg.Now); err != nil {
			return Genesis{}, err
		}
	}
	if err := db.Close(); err != nil {
		return Genesis{}, fmt.Errorf("close store: %w", err)
	}
	opSeed, _ := op.Seed()
	nodeSeed, _ := node.Seed()
	return Genesis{OperatorSeed: opSeed, NodeSeed: nodeSeed, Root: auth.Root(), SignPub: pub}, nil
}

// IsMesh reports whether dir (D/controller) holds a mesh: its store, or
// its signing key (a store deleted is rebuilt from the log on the bus).
func IsMesh(dir string) (bool, error) {
	for _, name := range []string{DBFile, SignKeyFile} {
		_, err := os.Stat(filepath.Join(dir, name))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("look for a mesh in %s: %w", dir, err)
		}
	}
	return false, nil
}

// LoadSignKey reads the controller's ed25519 signing key from dir.
func LoadSignKey(dir string) (ed25519.PrivateKey, error) {
	path := filepath.Join(dir, SignKeyFile)
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	block, _ := pem.Decode(body)
	if block == nil {
		return nil, fmt.Errorf("read signing key %s: no PEM block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("read signing key %s: %w", path, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("read signing key %s: not an ed25519 key", path)
	}
	return priv, nil
}

// SealKeyStore is what LoadSealKey reads of the store: every place it
// keeps text sealed under the at-rest key.
type SealKeyStore interface {
	Assignments(ctx context.Context) ([]store.Assignment, error)
	Grants(ctx context.Context) ([]store.Grant, error)
	EdgeStorageKey(ctx context.Context) (string, error)
	Intermediate(ctx context.Context) (store.Intermediate, error)
}

// LoadSealKey reads the controller's at-rest key from dir. A directory
// made before values were sealed has none: one is made, unless db holds
// any sealed value already (the key that sealed it is lost, and a new one
// would open none of them), which is refused, saying what to do. created
// says a key was made.
func LoadSealKey(ctx context.Context, dir string, db SealKeyStore) (key *seal.RestKey, created bool, err error) {
	path := filepath.Join(dir, SealKeyFile)
	key, err = seal.LoadRestKey(path)
	if !errors.Is(err, os.ErrNotExist) {
		return key, false, err
	}
	what, err := sealedValue(ctx, db)
	if err != nil {
		return nil, false, fmt.Errorf("look for sealed values before making %s: %w", path, err)
	}
	if what != "" {
		return nil, false, fmt.Errorf("%s is missing, but %s was sealed under it: put the controller's seal.key back from its backup", path, what)
	}
	key, err = seal.CreateRestKey(path)
	return key, err == nil, err
}

// sealedValue names the first value db keeps sealed under the at-rest key:
// a secret setting, a grant's credential, the edge storage key or the
// key of the CA's intermediate; empty when it keeps none.
func sealedValue(ctx context.Context, db SealKeyStore) (string, error) {
	as, err := db.Assignments(ctx)
	if err != nil {
		return "", err
	}
	for _, a := range as {
		for name, v := range a.Settings {
			if seal.IsSealedText(v) {
				return fmt.Sprintf("setting %q of module %s on node %s", name, a.Module, a.Node), nil
			}
		}
	}
	gs, err := db.Grants(ctx)
	if err != nil {
		return "", err
	}
	for _, g := range gs {
		if seal.IsSealedText(g.Credential) {
			return fmt.Sprintf("the credential of grant %q of module %s on node %s", g.Grant, g.Module, g.Node), nil
		}
	}
	switch text, err := db.EdgeStorageKey(ctx); {
	case err == nil && seal.IsSealedText(text):
		return "the edge storage key", nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return "", err
	}
	switch in, err := db.Intermediate(ctx); {
	case err == nil && seal.IsSealedText(in.KeySealed):
		return fmt.Sprintf("the key of the CA's intermediate %s", in.Serial), nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return "", err
	}
	return "", nil
}
