package spec

import (
	"fmt"
	"time"
)

// Releases: a mesh binary published with mesh release publish is stored as
// a blob, content-addressed, and recorded with the target the controller
// read from the file itself. Its identity is its digest, the hex SHA-256
// of the file: what a host running it reports as its host_version. Two
// releases have no order; nothing compares them but for equality.

// MaxRelease caps a release's bytes. mesh built by make build (-s -w) is
// about 30 MiB, and one built without stripping about 45: the cap leaves
// room for growth, and refuses a file that cannot be a mesh binary before
// it is uploaded.
const MaxRelease = 256 << 20

// Release is a published mesh binary.
type Release struct {
	Digest    string    `json:"digest"` // hex SHA-256 of the file
	GOOS      string    `json:"goos"`
	GOARCH    string    `json:"goarch"`
	Go        string    `json:"go"` // the Go version that built it
	Size      int64     `json:"size"`
	Published time.Time `json:"published"`
}

// Target is the release's GOOS/GOARCH.
func (r Release) Target() string { return r.GOOS + "/" + r.GOARCH }

type (
	// ReleasePublishRequest publishes the binary whose blob
	// ("sha256:" + Digest) was uploaded.
	ReleasePublishRequest struct {
		Digest string `json:"digest"`
	}
	// ReleasePublishResult is the release. Existed says it was published
	// before (when Published says) and nothing changed.
	ReleasePublishResult struct {
		Release Release `json:"release"`
		Existed bool    `json:"existed,omitempty"`
	}
	// ReleaseListRequest asks for the releases, in the order they were
	// published, from the first after After (from the first when 0).
	ReleaseListRequest struct {
		After int64 `json:"after,omitempty"`
	}
	// ReleaseListResult lists releases, as many as fit one reply. Next,
	// when set, says there are more: ask again with After set to it.
	ReleaseListResult struct {
		Releases []Release `json:"releases"`
		Next     int64     `json:"next,omitempty"`
	}
)

// CheckReleaseDigest refuses a digest that is not a SHA-256 written as
// mesh version writes it: 64 lower-case hex digits.
func CheckReleaseDigest(d string) error {
	if len(d) != 64 {
		return fmt.Errorf("release digest %q is not a SHA-256: 64 hex digits, as mesh version and mesh release list print it", d)
	}
	for _, c := range d {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("release digest %q is not a SHA-256: 64 lower-case hex digits, as mesh version and mesh release list print it", d)
		}
	}
	return nil
}
