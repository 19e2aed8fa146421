package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
)

// RuntimeDir is the host's runtime directory, under its own (D/host/run).
// The secrets of the container the engine calls NAME lie in
// run/secrets/NAME/, a tmpfs of its own: one file per secret, each bound
// read-only into the container at its target.
const RuntimeDir = "run"

// secretFiles keeps containers' secrets in files on a tmpfs, one a
// container, under the host's runtime directory: a value is held in
// memory only, never on the machine's disk, and goes with its container.
type secretFiles struct {
	runtime string        // D/host/run; "": the host keeps none
	seal    *seal.NodeKey // opens the sealed values; nil: the host keeps no key
}

// dir is where the secrets of the container the engine calls name lie.
func (s secretFiles) dir(name string) string {
	return filepath.Join(s.runtime, "secrets", name)
}

// source is the file on the machine that holds secret i (m) of the
// container the engine calls name: its bind mount's source.
func (s secretFiles) source(name string, i int, m spec.SecretMount) string {
	return filepath.Join(s.dir(name), strconv.Itoa(i)+"-"+m.Setting)
}

// check refuses c's secrets as this host cannot hand them over: one that
// came unsealed (the controller seals every one), and any when the host
// keeps no sealing key or no runtime directory.
func (s secretFiles) check(c *spec.ContainerSpec) error {
	for _, m := range c.Secrets {
		switch {
		case m.Sealed == "":
			return fmt.Errorf("container %s: secret %s came unsealed; it is refused", c.Name, m.Target)
		case s.seal == nil:
			return fmt.Errorf("container %s: secret %s is sealed to this node, and the host keeps no sealing key (%s): remove the node and join it again", c.Name, m.Target, seal.NodeKeyFile)
		case s.runtime == "":
			return fmt.Errorf("container %s: secret %s: the host keeps no runtime directory to hold it in", c.Name, m.Target)
		}
	}
	return nil
}

// open is each of c's secrets' value, opened with the node's key.
func (s secretFiles) open(c *spec.ContainerSpec) ([][]byte, error) {
	if err := s.check(c); err != nil {
		return nil, err
	}
	values := make([][]byte, len(c.Secrets))
	for i, m := range c.Secrets {
		v, err := s.seal.Open(m.Sealed)
		if err != nil {
			return nil, fmt.Errorf("container %s: open secret %s: %w", c.Name, m.Target, err)
		}
		values[i] = v
	}
	return values, nil
}

// write puts each of c's secrets (values, opened) in its file, mode 0444
// (as Swarm's), on the tmpfs of the container the engine calls name, which it mounts if
// it is not there and empties if it is. A tmpfs that cannot be had is a
// failure: a value is never written to disk.
func (s secretFiles) write(name string, c *spec.ContainerSpec, values [][]byte) error {
	dir := s.dir(name)
	if err := s.tmpfs(dir, c.Name); err != nil {
		return err
	}
	if err := empty(dir); err != nil {
		return fmt.Errorf("container %s: empty its secrets' tmpfs %s: %w", c.Name, dir, err)
	}
	for i, m := range c.Secrets {
		if err := writeSecret(s.source(name, i, m), values[i]); err != nil {
			return fmt.Errorf("container %s: write secret %s: %w", c.Name, m.Target, err)
		}
	}
	return nil
}

// tmpfs makes dir a tmpfs: one already is kept; else it is mounted
// (nosuid, nodev, noexec, mode 0700), which only root may do.
func (s secretFiles) tmpfs(dir, container string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("container %s: make the directory of its secrets: %w", container, err)
	}
	if onTmpfs(dir) {
		return nil
	}
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("container %s: its secrets need a tmpfs at %s, and the host runs as uid %d, not root, so it cannot mount one (a secret is never written to disk)", container, dir, uid)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700"); err != nil {
		return fmt.Errorf("container %s: its secrets need a tmpfs: mount one at %s: %w (a secret is never written to disk)", container, dir, err)
	}
	if !onTmpfs(dir) {
		return fmt.Errorf("container %s: a tmpfs mounted at %s is not seen there (a secret is never written to disk)", container, dir)
	}
	return nil
}

// remove removes the secrets of the container the engine calls name: the
// files, the tmpfs the host mounted for them, and its directory. None is
// removed.
func (s secretFiles) remove(name string) error {
	if s.runtime == "" {
		return nil
	}
	dir := s.dir(name)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := empty(dir); err != nil {
		return fmt.Errorf("remove the secrets of container %s: %w", name, err)
	}
	if mountPoint(dir) {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount the secrets' tmpfs of container %s at %s: %w", name, dir, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove the secrets' directory of container %s: %w", name, err)
	}
	return nil
}

// writeSecret writes value to a new file at path, mode 0444, as Swarm
// makes it: readable by whatever user the container runs as, and reached
// on the machine only through the container's own tmpfs directory (0700).
func writeSecret(path string, value []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o444)
	if err != nil {
		return err
	}
	_, err = f.Write(value)
	if err == nil {
		err = f.Chmod(0o444) // whatever the umask
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// empty removes everything in dir.
func empty(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// onTmpfs says whether path lies on a tmpfs.
func onTmpfs(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.TMPFS_MAGIC
}

// mountPoint says whether dir is mounted on: it lies on another device
// than its parent.
func mountPoint(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
