package host

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"path"
	"strings"
	"sync"
)

// archiveImageID is the ID of the image an image archive (docker save)
// holds under ref: "sha256:" and the SHA-256 of the image's config, which
// the archive's manifest.json names ("<hex>.json", or "blobs/sha256/<hex>"
// in the OCI layout). Empty when the archive does not say (no manifest, no
// entry tagged ref, a compression other than gzip): then only a load tells.
// The archive is read from its start, entry by entry: it is never held.
func archiveImageID(archive io.ReadSeeker, ref string) string {
	var manifest []struct {
		Config   string
		RepoTags []string
	}
	body, err := tarEntry(archive, "manifest.json")
	if err != nil || json.Unmarshal(body, &manifest) != nil {
		return ""
	}
	want := familiar(ref)
	for _, m := range manifest {
		for _, tag := range m.RepoTags {
			if familiar(tag) != want {
				continue
			}
			config, err := tarEntry(archive, m.Config)
			if err != nil {
				return ""
			}
			sum := sha256.Sum256(config)
			return "sha256:" + hex.EncodeToString(sum[:])
		}
	}
	return ""
}

// tarEntry is the content of the regular file called name in the tar
// archive (gzipped or not), read from its start.
func tarEntry(archive io.ReadSeeker, name string) ([]byte, error) {
	if _, err := archive.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	br := bufio.NewReader(archive)
	var r io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		r = gz
	}
	name = path.Clean(name)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg && path.Clean(h.Name) == name {
			if h.Size > 64<<20 {
				return nil, errors.New("entry too large")
			}
			return io.ReadAll(tr)
		}
	}
}

// familiar is an image reference as docker save writes its tags: without
// the default registry and namespace, and with the tag "latest" when none
// is given.
func familiar(ref string) string {
	ref = strings.TrimPrefix(ref, "docker.io/")
	ref = strings.TrimPrefix(ref, "library/")
	if !strings.Contains(ref, "@") && !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
		ref += ":latest"
	}
	return ref
}

// archiveIDs remembers the image ID each archive (by digest) holds, so a
// container created again from an archive the engine already holds fetches
// nothing.
type archiveIDs struct {
	mu  sync.Mutex
	ids map[string]string
}

func (a *archiveIDs) get(digest string) string {
	if a == nil {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[digest]
}

func (a *archiveIDs) put(digest, id string) {
	if a == nil || id == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids = map[string]string{}
	}
	a.ids[digest] = id
}
