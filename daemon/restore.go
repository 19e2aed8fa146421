package daemon

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/statedir"
)

// Restore is what mesh restore needs.
type Restore struct {
	File       string // the backup
	Dir        string // the state directory made: absent or empty
	Passphrase string
	Now        time.Time
}

// ErrWrongPassphrase is a backup the passphrase given does not open.
var ErrWrongPassphrase = errors.New("the passphrase does not open this backup")

// maxBackupHeader caps the header's size as it is read.
const maxBackupHeader = 1 << 20

// RestoreBackup makes r.Dir a controller's state directory from the
// backup r.File: every file it holds, keys 0600 and directories 0700 as
// genesis makes them, the host's state as a bare machine's (its identity
// and trust, nothing applied), and every sequence the store sent raised
// past any a host may have seen since (mesh.Renumber). mesh controller
// --dir r.Dir then runs it with the flags and addresses kept in it. A
// directory that holds anything is refused, and changes nothing; on
// failure what was written is removed.
func RestoreBackup(ctx context.Context, r Restore) (h BackupHeader, err error) {
	if err := refuseNonEmpty(r.Dir); err != nil {
		return BackupHeader{}, err
	}
	f, err := os.Open(r.File)
	if err != nil {
		return BackupHeader{}, fmt.Errorf("read backup: %w", err)
	}
	defer f.Close()
	id, err := age.NewScryptIdentity(r.Passphrase)
	if err != nil {
		return BackupHeader{}, fmt.Errorf("read backup %s: %w", r.File, err)
	}
	plain, err := age.Decrypt(bufio.NewReader(f), id)
	if err != nil {
		var noMatch *age.NoIdentityMatchError
		if errors.As(err, &noMatch) {
			return BackupHeader{}, fmt.Errorf("read backup %s: %w: nothing was written", r.File, ErrWrongPassphrase)
		}
		return BackupHeader{}, fmt.Errorf("read backup %s: not a mesh backup, or damaged: %w: nothing was written", r.File, err)
	}
	made := false
	if _, statErr := os.Stat(r.Dir); errors.Is(statErr, os.ErrNotExist) {
		made = true
	}
	if err := os.MkdirAll(r.Dir, 0o700); err != nil {
		return BackupHeader{}, fmt.Errorf("create %s: %w", r.Dir, err)
	}
	defer func() {
		if err == nil {
			return
		}
		if made {
			os.RemoveAll(r.Dir)
			return
		}
		entries, _ := os.ReadDir(r.Dir)
		for _, e := range entries {
			os.RemoveAll(filepath.Join(r.Dir, e.Name()))
		}
	}()
	if err := os.Chmod(r.Dir, 0o700); err != nil {
		return BackupHeader{}, fmt.Errorf("create %s: %w", r.Dir, err)
	}
	h, err = extract(tar.NewReader(plain), r.Dir)
	if err != nil {
		return BackupHeader{}, fmt.Errorf("restore %s into %s: %w", r.File, r.Dir, err)
	}
	if err := bareHost(statedir.Host(r.Dir)); err != nil {
		return BackupHeader{}, fmt.Errorf("restore %s into %s: %w", r.File, r.Dir, err)
	}
	if err := mesh.Renumber(ctx, statedir.Controller(r.Dir), mesh.RenumberGap, r.Now); err != nil {
		return BackupHeader{}, fmt.Errorf("restore %s into %s: %w", r.File, r.Dir, err)
	}
	return h, nil
}

// refuseNonEmpty refuses a directory that holds anything.
func refuseNonEmpty(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty: restore into an empty or new directory; nothing was written", dir)
	}
	return nil
}

// extract writes the archive tr under dir: its header first, then each
// member the header lists, no other; it checks that every one it lists
// was there.
func extract(tr *tar.Reader, dir string) (BackupHeader, error) {
	var h BackupHeader
	hdr, err := tr.Next()
	if err != nil {
		return h, fmt.Errorf("read the backup's header: %w", err)
	}
	if hdr.Name != backupHeaderName || hdr.Size > maxBackupHeader {
		return h, fmt.Errorf("the backup starts with %q, not its header: not a mesh backup", hdr.Name)
	}
	body, err := io.ReadAll(tr)
	if err != nil {
		return h, fmt.Errorf("read the backup's header: %w", err)
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return h, fmt.Errorf("read the backup's header: %w", err)
	}
	if h.Format != BackupFormat {
		return h, fmt.Errorf("the backup's format is %q, not %q", h.Format, BackupFormat)
	}
	if h.Version != BackupVersion {
		return h, fmt.Errorf("the backup's format is version %d; this mesh reads version %d: restore it with the mesh that wrote it (%s)", h.Version, BackupVersion, h.Binary)
	}
	seen := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return h, fmt.Errorf("read the backup: %w", err)
		}
		name := filepath.FromSlash(hdr.Name)
		if hdr.Typeflag != tar.TypeReg || !slices.Contains(h.Files, name) || seen[name] || !local(hdr.Name) {
			return h, fmt.Errorf("the backup holds %q, which its header does not list", hdr.Name)
		}
		seen[name] = true
		if err := writeMember(filepath.Join(dir, name), tr, os.FileMode(hdr.Mode).Perm()&0o644); err != nil {
			return h, err
		}
	}
	for _, name := range h.Files {
		if !seen[name] {
			return h, fmt.Errorf("the backup lacks %s, which its header lists: it is cut short", name)
		}
	}
	if !seen[storeMember] {
		return h, fmt.Errorf("the backup holds no store")
	}
	return h, nil
}

// local says name is a path under the directory, not out of it.
func local(name string) bool {
	return name != "" && !path.IsAbs(name) && path.Clean(name) == name && name != ".." && !strings.HasPrefix(name, "../")
}

// writeMember writes what r holds to a new file at p, mode perm, its
// directories made 0700, and syncs it.
func writeMember(p string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(p), err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	defer f.Close()
	if _, err := io.Copy(f, r); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return f.Close()
}

// bareHost makes the host's state in dir a bare machine's: what it is
// (its node, its mesh, where the bus is) and whom it trusts (the CA, the
// signing key) kept, nothing held or applied, so it takes its declaration
// and the roster in force when it starts, and applies them whole. The
// archive's state.json is what the old machine held.
func bareHost(dir string) error {
	st, _, err := host.ReadState(dir)
	if err != nil {
		return err
	}
	bare := host.State{Mesh: st.Mesh, Node: st.Node, Address: st.Address, Bus: st.Bus,
		CAPin: st.CAPin, CARoot: st.CARoot, CAChain: st.CAChain, SignKey: st.SignKey}
	return host.WriteState(dir, bare)
}
