package launch

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mesh-fleet/mesh/internal/safefile"
	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
)

// readLaunch reads D/host/versions/launch.json; none yet is an empty
// record. Another version of mesh may have written it, so fields it does
// not know are let pass.
func readLaunch(versions string) (spec.Launch, error) {
	var l spec.Launch
	path := filepath.Join(versions, spec.LaunchFile)
	body, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("read the launcher's record: %w", err)
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return l, fmt.Errorf("%s does not decode: %w (remove it: the launcher then runs the version the node wants, or its own)", path, err)
	}
	return l, nil
}

// writeLaunch writes launch.json atomically.
func writeLaunch(versions string, l spec.Launch) error {
	if err := os.MkdirAll(versions, 0o700); err != nil {
		return fmt.Errorf("write the launcher's record: %w", err)
	}
	body, _ := json.MarshalIndent(l, "", "  ")
	if err := safefile.WriteFile(filepath.Join(versions, spec.LaunchFile), append(body, '\n'), 0o600); err != nil {
		return fmt.Errorf("write the launcher's record: %w", err)
	}
	return nil
}

// pick is the version the launcher starts, and the one it falls back to
// if that does not come up.
type pick struct {
	digest, path string
	why          string
	fallback     string // a digest; equal to digest: nothing to fall back to
}

// choose picks the wanted version if it is delivered whole and not bad,
// else the last good one, else the launcher's own executable.
func (l *Launcher) choose() (pick, error) {
	fb := pick{digest: l.selfDigest, path: l.cfg.Self, why: "the launcher's own executable"}
	if good := l.launch.Good; good != "" && good != l.selfDigest {
		if path, err := l.verified(good); err == nil {
			fb = pick{digest: good, path: path, why: "the last version that was ready"}
		} else {
			l.log.Warn("the last good version cannot run; the launcher's own executable is the fallback", "version", short(good), "err", err)
		}
	} else if good == l.selfDigest {
		fb.why = "the last version that was ready"
	}
	fb.fallback = fb.digest
	want, err := l.want()
	if err != nil || want == "" || want == fb.digest {
		return fb, err
	}
	if bad, ok := l.launch.Bad[want]; ok {
		r, asked := l.retry()
		if !asked || r.Digest != want || !l.launch.Retries(r) {
			fb.why += "; the wanted " + short(want) + " is bad: " + bad.Reason
			return fb, nil
		}
		// A resumed roll asks for it again: the mark goes, once for this
		// count, and it is tried like any version not yet run.
		l.log.Info("trying a version marked bad again: a resumed roll asks for it", "version", short(want), "was", bad.Reason, "retry", r.Count)
		delete(l.launch.Bad, want)
		if l.launch.Retried == nil {
			l.launch.Retried = map[string]int{}
		}
		l.launch.Retried[want] = r.Count
		if err := l.save(); err != nil {
			return fb, err
		}
	}
	path, err := l.verified(want)
	if errors.Is(err, os.ErrNotExist) {
		fb.why += "; the wanted " + short(want) + " is not delivered"
		return fb, nil
	}
	if err != nil {
		// Delivered but not whole (or not readable): never run, and the
		// child does not stand aside for it again.
		if err := l.giveUp(pick{digest: want, fallback: fb.digest}, err.Error()); err != nil {
			return fb, err
		}
		fb.why += "; the wanted " + short(want) + " is bad"
		return fb, nil
	}
	return pick{digest: want, path: path, why: "the version the node wants", fallback: fb.digest}, nil
}

// retry is what D/host/versions/retry asks, if it is there and reads; a
// read that failed is said, and a version marked bad stays bad.
func (l *Launcher) retry() (spec.Retry, bool) {
	r, ok, err := spec.ReadRetry(l.versions)
	if err != nil {
		l.log.Warn("the retry file cannot be read; a version marked bad stays bad", "err", err)
	}
	return r, ok
}

// want is the digest D/host/versions/want names, or "" when it is absent
// or names none (spec.ReadWant, which the child reads it by too).
func (l *Launcher) want() (string, error) {
	want, err := spec.ReadWant(l.versions)
	if errors.Is(err, spec.ErrBadWant) {
		l.log.Warn("the wanted version is ignored", "err", err)
		return "", nil
	}
	return want, err
}

// verified is the path of the delivered binary named digest once its
// bytes are checked to hash to it; the launcher's own executable when
// digest names it and it is not delivered.
func (l *Launcher) verified(digest string) (string, error) {
	path := filepath.Join(l.versions, digest, spec.VersionBinary)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && digest == l.selfDigest {
		return l.cfg.Self, nil
	} else if err != nil {
		return "", err
	}
	got, err := release.Digest(path)
	if err != nil {
		return "", err
	}
	if got != digest {
		return "", fmt.Errorf("%s hashes to %s, not to the digest it is delivered as", path, short(got))
	}
	return path, nil
}
