package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// Digest is the hex SHA-256 of the executable at path, or of the running
// one when path is empty: a release's identity, the version a host reports
// (never a link-time stamp) and the name of a delivered binary's directory.
func Digest(path string) (string, error) {
	if path == "" {
		p, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("find the running executable: %w", err)
		}
		path = p
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read the executable: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read the executable %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
