package daemon

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/mesh-fleet/mesh/store"
)

// A backup is one file: an age file sealed with a passphrase (scrypt)
// holding a tar archive, whose first member is the header (BackupHeader,
// JSON) and the others the files of a controller's state directory D it
// needs to run again on another machine, by their paths under D: the
// store (a consistent copy, taken while the controller runs), every key
// (the signing key, the at-rest key, the CA, the operator's and the
// node's credentials, the host's sealing and WireGuard keys), the host's
// state, the addresses bound and config.yaml. The whole archive is
// sealed, not the keys alone: the store holds secret settings sealed
// under the at-rest key that travels beside it.
//
// Not in it: the declaration stream (D/controller/js; the restored
// controller starts a fresh one, and Renumber keeps every host taking
// what it sends), the host's applied record and its versions (a restored
// machine is bare: it applies its declaration whole), the certificates
// its edge obtained (obtained again).
const (
	BackupFormat  = "mesh-backup"
	BackupVersion = 1
	// backupHeaderName is the archive's first member.
	backupHeaderName = "backup.json"
	// MinPassphrase is the shortest passphrase a backup is sealed with.
	MinPassphrase = 12
)

// BackupHeader says what a backup holds and where it came from.
type BackupHeader struct {
	Format  string    `json:"format"`
	Version int       `json:"version"`
	Mesh    string    `json:"mesh"`
	Created time.Time `json:"created"`
	// Binary is the version of mesh that wrote it.
	Binary string `json:"binary"`
	// Files are the members after the header, by their paths under D.
	Files []string `json:"files"`
}

// backupFile is a file of D a backup holds, by its path under D.
type backupFile struct {
	path     string
	required bool
}

// backupFiles are the single files a backup holds; D/controller/ca is
// held whole besides.
var backupFiles = []backupFile{
	{filepath.Join(statedir.ControllerDir, mesh.SignKeyFile), true},
	{filepath.Join(statedir.ControllerDir, mesh.SealKeyFile), true},
	{statedir.OperatorCreds, true},
	{statedir.AddrsFile, true},
	{statedir.ConfigFile, false},
	{filepath.Join(statedir.HostDir, host.StateFile), true},
	{filepath.Join(statedir.HostDir, host.CredsFile), true},
	{filepath.Join(statedir.HostDir, seal.NodeKeyFile), false},
	{filepath.Join(statedir.HostDir, seal.WGKeyFile), false},
}

// storeMember is the store's path in the archive.
var storeMember = filepath.Join(statedir.ControllerDir, mesh.DBFile)

// Backup is what mesh backup needs.
type Backup struct {
	Dir        string // the controller's state directory D
	File       string // where the backup is written; a file there is replaced
	Passphrase string
	Binary     string // the version of mesh writing it
	Now        time.Time
	// WorkFactor is scrypt's log2 cost for the passphrase; 0: age's.
	WorkFactor int
}

// CheckPassphrase refuses a passphrase too short to seal a mesh's keys.
func CheckPassphrase(p string) error {
	if len(p) < MinPassphrase {
		return fmt.Errorf("the passphrase is %d characters: give one of at least %d", len(p), MinPassphrase)
	}
	return nil
}

// WriteBackup writes b.File: a consistent copy of the mesh in b.Dir,
// sealed with b.Passphrase, while its controller runs or not. The file is
// written beside and renamed once whole, 0600.
func WriteBackup(ctx context.Context, b Backup) (BackupHeader, error) {
	if err := CheckPassphrase(b.Passphrase); err != nil {
		return BackupHeader{}, err
	}
	ok, err := mesh.IsMesh(statedir.Controller(b.Dir))
	if err != nil {
		return BackupHeader{}, err
	}
	if !ok {
		return BackupHeader{}, fmt.Errorf("%s holds no mesh's controller: give mesh backup the --dir of the controller's machine", b.Dir)
	}
	op, err := statedir.ReadOperator(b.Dir)
	if err != nil {
		return BackupHeader{}, err
	}
	members, err := backupMembers(b.Dir)
	if err != nil {
		return BackupHeader{}, err
	}
	scratch, err := os.MkdirTemp("", "mesh-backup-")
	if err != nil {
		return BackupHeader{}, fmt.Errorf("back up %s: %w", b.Dir, err)
	}
	defer os.RemoveAll(scratch)
	snap := filepath.Join(scratch, mesh.DBFile)
	if err := store.Snapshot(ctx, filepath.Join(statedir.Controller(b.Dir), mesh.DBFile), snap); err != nil {
		return BackupHeader{}, fmt.Errorf("back up %s: %w", b.Dir, err)
	}
	h := BackupHeader{Format: BackupFormat, Version: BackupVersion, Mesh: op.Mesh, Created: b.Now.UTC(), Binary: b.Binary,
		Files: append([]string{storeMember}, members...)}
	tmp, err := os.CreateTemp(filepath.Dir(b.File), "."+filepath.Base(b.File)+".*")
	if err != nil {
		return BackupHeader{}, fmt.Errorf("write backup %s: %w", b.File, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if err := tmp.Chmod(0o600); err != nil {
		return BackupHeader{}, fmt.Errorf("write backup %s: %w", b.File, err)
	}
	if err := sealArchive(tmp, b, h, snap); err != nil {
		return BackupHeader{}, fmt.Errorf("write backup %s: %w", b.File, err)
	}
	if err := tmp.Sync(); err != nil {
		return BackupHeader{}, fmt.Errorf("write backup %s: %w", b.File, err)
	}
	if err := tmp.Close(); err != nil {
		return BackupHeader{}, fmt.Errorf("write backup %s: %w", b.File, err)
	}
	if err := os.Rename(tmp.Name(), b.File); err != nil {
		return BackupHeader{}, fmt.Errorf("write backup %s: %w", b.File, err)
	}
	return h, nil
}

// backupMembers are the paths under dir, besides the store, a backup
// holds: those of backupFiles there (a required one missing is an error)
// and every file under the CA's directory.
func backupMembers(dir string) ([]string, error) {
	var out []string
	for _, f := range backupFiles {
		_, err := os.Stat(filepath.Join(dir, f.path))
		switch {
		case errors.Is(err, os.ErrNotExist) && !f.required:
			continue
		case err != nil:
			return nil, fmt.Errorf("back up %s: %w", dir, err)
		}
		out = append(out, f.path)
	}
	caDir := filepath.Join(statedir.ControllerDir, mesh.CADir)
	err := filepath.WalkDir(filepath.Join(dir, caDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("back up %s: the CA: %w", dir, err)
	}
	return out, nil
}

// sealArchive writes to w the archive of h's members, sealed with b's
// passphrase: the store from snap, the others from b.Dir.
func sealArchive(w io.Writer, b Backup, h BackupHeader, snap string) error {
	r, err := age.NewScryptRecipient(b.Passphrase)
	if err != nil {
		return err
	}
	if b.WorkFactor > 0 {
		r.SetWorkFactor(b.WorkFactor)
	}
	sealed, err := age.Encrypt(w, r)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(sealed)
	head, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: backupHeaderName, Mode: 0o600, Size: int64(len(head)), ModTime: h.Created, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(head); err != nil {
		return err
	}
	for _, name := range h.Files {
		from := filepath.Join(b.Dir, name)
		if name == storeMember {
			from = snap
		}
		if err := addMember(tw, name, from, h.Created); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return sealed.Close()
}

// addMember adds the file at from to tw as name, with its mode.
func addMember(tw *tar.Writer, name, from string, at time.Time) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", from)
	}
	hdr := &tar.Header{Name: filepath.ToSlash(name), Mode: int64(info.Mode().Perm()), Size: info.Size(), ModTime: at, Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, info.Size()); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	return nil
}
