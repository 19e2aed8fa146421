package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mesh-fleet/mesh/internal/safefile"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/statedir"
)

// SharedKeys are what every controller of a mesh holds alike, as a
// joining controller receives them, sealed to its own key (seal.SealTo):
// the files of D/controller that are keys (the declaration signing key,
// the at-rest key, the CA whole, its signing key with it) and the
// cluster's state (the route credentials and the peers); and the
// operator's credential, so that mesh's commands run on every
// controller's machine.
type SharedKeys struct {
	Files    []SharedFile       `json:"files"`
	Cluster  ClusterState       `json:"cluster"`
	Operator *statedir.Operator `json:"operator,omitempty"`
}

// SharedFile is one file of D/controller: its path under it, its mode
// and its bytes.
type SharedFile struct {
	Path string      `json:"path"`
	Mode fs.FileMode `json:"mode"`
	Data []byte      `json:"data"`
}

// sharedFiles are the single files of D/controller a joining controller
// receives; D/controller/ca is sent whole besides.
var sharedFiles = []string{mesh.SignKeyFile, mesh.SealKeyFile}

// ReadSharedKeys reads the shared keys of the controller in dir, with
// cluster, the state to hand the joining controller.
func ReadSharedKeys(dir string, cluster ClusterState) (SharedKeys, error) {
	ctlDir := statedir.Controller(dir)
	keys := SharedKeys{Cluster: cluster}
	add := func(rel string) error {
		path := filepath.Join(ctlDir, rel)
		fi, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("read the shared keys: %w", err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("read the shared keys: %w", err)
		}
		keys.Files = append(keys.Files, SharedFile{Path: filepath.ToSlash(rel), Mode: fi.Mode().Perm(), Data: data})
		return nil
	}
	for _, rel := range sharedFiles {
		if err := add(rel); err != nil {
			return SharedKeys{}, err
		}
	}
	err := filepath.WalkDir(filepath.Join(ctlDir, mesh.CADir), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(ctlDir, path)
		return add(rel)
	})
	if err != nil {
		return SharedKeys{}, fmt.Errorf("read the CA's files: %w", err)
	}
	if op, err := statedir.ReadOperator(dir); err == nil {
		keys.Operator = &op
	} else if _, statErr := os.Stat(filepath.Join(dir, statedir.OperatorCreds)); !errors.Is(statErr, os.ErrNotExist) {
		return SharedKeys{}, err
	}
	return keys, nil
}

// Seal is k sealed to the joining controller's public key: only the
// holder of its private half reads it.
func (k SharedKeys) Seal(to seal.NodePublic) (string, error) {
	body, err := json.Marshal(k)
	if err != nil {
		return "", fmt.Errorf("encode the shared keys: %w", err)
	}
	return seal.SealTo(to, body)
}

// OpenSharedKeys opens what Seal sealed to key.
func OpenSharedKeys(key *seal.NodeKey, sealed string) (SharedKeys, error) {
	body, err := key.Open(sealed)
	if err != nil {
		return SharedKeys{}, fmt.Errorf("open the shared keys: %w", err)
	}
	var k SharedKeys
	if err := json.Unmarshal(body, &k); err != nil {
		return SharedKeys{}, fmt.Errorf("read the shared keys: %w", err)
	}
	return k, nil
}

// Write writes k's files into D/controller of dir with the modes they
// had on the controller that sent them (its directories 0700), and the
// cluster's state. A path that would leave D/controller is refused.
func (k SharedKeys) Write(dir string) error {
	if len(k.Files) == 0 {
		return errors.New("write the shared keys: none was sent")
	}
	ctlDir := statedir.Controller(dir)
	if err := os.MkdirAll(ctlDir, 0o700); err != nil {
		return fmt.Errorf("write the shared keys: %w", err)
	}
	for _, f := range k.Files {
		rel := filepath.FromSlash(f.Path)
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("write the shared keys: %q is not a path under the controller's directory", f.Path)
		}
		path := filepath.Join(ctlDir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return fmt.Errorf("write the shared keys: %w", err)
		}
		if err := safefile.WriteFile(path, f.Data, f.Mode.Perm()); err != nil {
			return fmt.Errorf("write the shared keys: %w", err)
		}
	}
	return WriteClusterState(dir, k.Cluster)
}
