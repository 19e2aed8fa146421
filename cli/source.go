package cli

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/mesh-fleet/mesh/spec"
)

// openSource opens a manifest's source (a file's content, a container's
// image archive): a regular file in the module's directory dir, reached
// through no symbolic link. A link could lead anywhere on the operator's
// machine, and the rule that a source holds no ".." would mean nothing; so
// the source itself, and every directory on the way to it, is refused when
// it is a link, naming it. The open goes through an os.Root of dir, so
// nothing outside it is read even if the directory changes meanwhile. It
// returns the file, open, and its size.
func openSource(dir, source string) (*os.File, int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("open the module's directory %s: %w", dir, bare(err))
	}
	defer root.Close()
	parts := strings.Split(source, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := root.Lstat(p)
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", filepath.Join(dir, p), bare(err))
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := root.Readlink(p)
			return nil, 0, fmt.Errorf("%s is a symbolic link (-> %s): a source must be a regular file in the module's directory, reached through no link; put the file itself there", filepath.Join(dir, p), target)
		}
	}
	f, err := root.OpenFile(source, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", filepath.Join(dir, source), bare(err))
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("read %s: %w", filepath.Join(dir, source), bare(err))
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, fmt.Errorf("%s is not a regular file: a source must be one", filepath.Join(dir, source))
	}
	return f, fi.Size(), nil
}

// readSource reads a source (see openSource) in one streaming pass: its
// size and digest, and its bytes only when they travel inline. A larger
// source is read again, a chunk at a time, when it is uploaded.
func readSource(dir, source string) (spec.Content, error) {
	f, size, err := openSource(dir, source)
	if err != nil {
		return spec.Content{}, err
	}
	defer f.Close()
	h := sha256.New()
	var small bytes.Buffer
	var w io.Writer = h
	if size <= spec.InlineMax {
		w = io.MultiWriter(h, &small)
	}
	n, err := io.Copy(w, f)
	if err != nil {
		return spec.Content{}, fmt.Errorf("read %s: %w", filepath.Join(dir, source), bare(err))
	}
	if n != size {
		return spec.Content{}, fmt.Errorf("read %s: it changed while it was read (%d bytes, then %d): run the command again once it is written", filepath.Join(dir, source), size, n)
	}
	c := spec.Content{Size: n, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil))}
	if size <= spec.InlineMax {
		c.Data = small.Bytes()
		if c.Data == nil {
			c.Data = []byte{}
		}
	}
	return c, nil
}

// bare is err without the *fs.PathError around it, whose path is relative
// to a root the message names already.
func bare(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
