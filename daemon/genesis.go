package daemon

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/mesh-fleet/mesh/seal"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/statedir"
)

// Genesis is a new mesh: its name, its first node, and where that node is
// reached.
type Genesis struct {
	Dir     string // the state directory, absent or empty
	Mesh    string
	Node    string
	Address string // where other nodes reach this one
	Bus     string // the address the bus binds
	// Overlay is the overlay's range, turned on at creation; empty: off.
	Overlay string
}

// RefuseExisting refuses a directory that already holds a mesh, or
// anything.
func RefuseExisting(dir string) error {
	ok, err := mesh.IsMesh(statedir.Controller(dir))
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("%s already holds a mesh: run it again with mesh controller --dir %s", dir, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty and holds no mesh: give genesis an empty or new directory", dir)
	}
	return nil
}

// Create writes a new mesh into g.Dir: the controller's store, keys and
// CA, the operator's credential, and the host of its first node. On
// failure it removes what it wrote.
func Create(ctx context.Context, g Genesis) (err error) {
	dir := g.Dir
	made := false
	if _, statErr := os.Stat(dir); errors.Is(statErr, os.ErrNotExist) {
		made = true
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	defer func() {
		if err == nil {
			return
		}
		if made {
			os.RemoveAll(dir)
			return
		}
		for _, name := range []string{statedir.ControllerDir, statedir.HostDir, statedir.OperatorCreds, statedir.AddrsFile} {
			os.RemoveAll(filepath.Join(dir, name))
		}
	}()
	sealKey, err := seal.GenerateNodeKey()
	if err != nil {
		return fmt.Errorf("make the first node's sealing key: %w", err)
	}
	// The first node's WireGuard key, made as a joining host makes its
	// own: the private half in its host's directory.
	if err := os.MkdirAll(statedir.Host(dir), 0o700); err != nil {
		return fmt.Errorf("create host directory: %w", err)
	}
	wgKey, err := seal.MakeWGKey(filepath.Join(statedir.Host(dir), seal.WGKeyFile))
	if err != nil {
		return fmt.Errorf("make the first node's wireguard key: %w", err)
	}
	created, err := mesh.Create(ctx, mesh.GenesisConfig{
		Dir: statedir.Controller(dir), Mesh: g.Mesh, Node: g.Node, Address: g.Address, SealKey: sealKey.Public().String(),
		WGKey: wgKey, Overlay: g.Overlay, Now: time.Now(),
	})
	if err != nil {
		return err
	}
	if err := host.KeepSealKey(statedir.Host(dir), sealKey); err != nil {
		return err
	}
	root := string(ca.RootPEM(created.Root))
	if err := statedir.WriteOperator(dir, statedir.Operator{Mesh: g.Mesh, Seed: string(created.OperatorSeed), CARoot: root}); err != nil {
		return err
	}
	return host.Init(statedir.Host(dir), host.State{
		Mesh:    g.Mesh,
		Node:    g.Node,
		Address: g.Address,
		Bus:     []string{"nats://" + Dialable(g.Bus)},
		CAPin:   ca.Pin(created.Root),
		CARoot:  root,
		SignKey: base64.StdEncoding.EncodeToString(created.SignPub),
	}, created.NodeSeed)
}
