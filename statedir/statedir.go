// Package statedir reads and writes the files of a mesh's state directory
// D (docs/design.md, "Lifecycle"): D/addrs.json, D/operator.creds,
// D/config.yaml, D/executable.sha256 and D/.lock. The controller's and the host's own
// directories under D belong to mesh and host.
package statedir

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mesh-fleet/mesh/internal/safefile"
	"github.com/mesh-fleet/mesh/spec"
)

// The state directory's layout.
const (
	AddrsFile      = "addrs.json"     // the addresses actually bound
	OperatorCreds  = "operator.creds" // the operator's credential, 0600
	ConfigFile     = "config.yaml"    // the flags this machine runs with
	LockFile       = ".lock"          // held by the process running on D
	LaunchLockFile = ".launch.lock"   // held by the launcher running on D
	ControllerDir  = "controller"     // mesh.db, js/, sign.key, seal.key, ca/
	HostDir        = "host"           // state.json, node.creds
	// DigestFile keeps the SHA-256 of the executable last run on D, under
	// its file identity (release.DigestKept).
	DigestFile = "executable.sha256"
)

// ExecutableDigest is where the digest of the executable run on dir is
// kept.
func ExecutableDigest(dir string) string { return filepath.Join(dir, DigestFile) }

// Controller is the controller's directory under dir.
func Controller(dir string) string { return filepath.Join(dir, ControllerDir) }

// Host is the host's directory under dir.
func Host(dir string) string { return filepath.Join(dir, HostDir) }

// ReadAddrs reads D/addrs.json, which must name the bus.
func ReadAddrs(dir string) (spec.Addrs, error) {
	var a spec.Addrs
	body, err := os.ReadFile(filepath.Join(dir, AddrsFile))
	if err != nil {
		return a, fmt.Errorf("read the mesh's addresses: %w (is %s a mesh's state directory?)", err, dir)
	}
	if err := spec.Decode(body, &a); err != nil {
		return a, fmt.Errorf("read %s: %w", filepath.Join(dir, AddrsFile), err)
	}
	if a.Bus == "" {
		return a, fmt.Errorf("%s names no bus address", filepath.Join(dir, AddrsFile))
	}
	return a, nil
}

// WriteAddrs writes D/addrs.json atomically.
func WriteAddrs(dir string, a spec.Addrs) error {
	body, _ := json.MarshalIndent(a, "", "  ")
	if err := safefile.WriteFile(filepath.Join(dir, AddrsFile), append(body, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", AddrsFile, err)
	}
	return nil
}

// Operator is D/operator.creds: the operator's bus credential and the
// root that the bus's certificate must chain to.
type Operator struct {
	Mesh   string `json:"mesh"`
	Seed   string `json:"seed"`
	CARoot string `json:"ca_root"`
}

// WriteOperator writes D/operator.creds atomically, 0600.
func WriteOperator(dir string, f Operator) error {
	body, _ := json.MarshalIndent(f, "", "  ")
	if err := safefile.WriteFile(filepath.Join(dir, OperatorCreds), append(body, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", OperatorCreds, err)
	}
	return nil
}

// ReadOperator reads D/operator.creds.
func ReadOperator(dir string) (Operator, error) {
	var f Operator
	path := filepath.Join(dir, OperatorCreds)
	body, err := os.ReadFile(path)
	if err != nil {
		return f, fmt.Errorf("read the operator credential: %w (is %s a mesh's state directory? --dir or MESH_DIR names it)", err, dir)
	}
	if err := spec.Decode(body, &f); err != nil {
		return f, fmt.Errorf("read %s: %w", path, err)
	}
	return f, nil
}
