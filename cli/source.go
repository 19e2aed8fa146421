package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// readSource reads a manifest's source (a file's content, a container's
// image archive): a regular file in the module's directory dir, reached
// through no symbolic link. A link could lead anywhere on the operator's
// machine, and the rule that a source holds no ".." would mean nothing; so
// the source itself, and every directory on the way to it, is refused when
// it is a link, naming it. The read goes through an os.Root of dir, so
// nothing outside it is read even if the directory changes meanwhile.
func readSource(dir, source string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open the module's directory %s: %w", dir, bare(err))
	}
	defer root.Close()
	parts := strings.Split(source, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		fi, err := root.Lstat(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, p), bare(err))
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, _ := root.Readlink(p)
			return nil, fmt.Errorf("%s is a symbolic link (-> %s): a source must be a regular file in the module's directory, reached through no link; put the file itself there", filepath.Join(dir, p), target)
		}
	}
	f, err := root.OpenFile(source, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, source), bare(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, source), bare(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file: a source must be one", filepath.Join(dir, source))
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, source), bare(err))
	}
	return b, nil
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
