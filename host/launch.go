package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// ErrStandAside ends Run when the version of mesh the node wants is
// delivered and is not the one running, and a launcher runs this process:
// the process exits with spec.ExitStandAside, and the launcher starts the
// wanted version.
var ErrStandAside = errors.New("the version this node wants is delivered: standing aside for it")

// The files of D/host/versions (spec/launch.go) the host reads: want,
// which its binary resource writes, and launch.json, the launcher's.

func (a *Agent) versions() string { return filepath.Join(a.cfg.Dir, spec.VersionsDir) }

// readLaunch reads the launcher's record; none is an empty one.
func (a *Agent) readLaunch() (spec.Launch, error) { return readLaunchIn(a.versions()) }

// readLaunchIn reads the launcher's record in the versions directory dir;
// none is an empty one. A newer launcher may write fields this host does
// not know: they are let pass.
func readLaunchIn(dir string) (spec.Launch, error) {
	var l spec.Launch
	body, err := os.ReadFile(filepath.Join(dir, spec.LaunchFile))
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("read the launcher's record: %w", err)
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return l, fmt.Errorf("the launcher's record %s does not decode: %w", filepath.Join(dir, spec.LaunchFile), err)
	}
	return l, nil
}

// fallbacks are the versions the launcher gave up on, for a heartbeat; a
// record that cannot be read is said in the log, once until it changes.
func (a *Agent) fallbacks() []spec.Fallback {
	l, err := a.readLaunch()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if last := a.launchErr.Swap(&msg); (last == nil || *last != msg) && err != nil {
		a.log.Warn("heartbeats carry no fallbacks", "err", err)
	}
	return l.Fallbacks()
}

// newVersion is the digest the node wants when it is delivered, is not
// version (the one running) and the launcher did not give up on it; ""
// when there is none such. The want file is read as the launcher reads it
// (spec.ReadWant): one it ignores is no version to stand aside for, said
// once until it changes.
func (a *Agent) newVersion(version string) (string, error) {
	want, err := spec.ReadWant(a.versions())
	if errors.Is(err, spec.ErrBadWant) {
		if a.badWant != err.Error() {
			a.badWant = err.Error()
			a.log.Warn("the wanted version is ignored", "err", err)
		}
		return "", nil
	}
	if err != nil {
		return "", err
	}
	a.badWant = ""
	if want == version || want == "" {
		return "", nil
	}
	if _, err := os.Stat(filepath.Join(a.versions(), want, spec.VersionBinary)); err != nil {
		return "", nil // not delivered (yet): the binary comes before want
	}
	l, err := a.readLaunch()
	if err != nil {
		return "", err
	}
	if _, bad := l.Bad[want]; bad {
		// Bad, unless a resumed roll asks for it again: the launcher
		// clears the mark when this process stands aside.
		r, ok, err := spec.ReadRetry(a.versions())
		if err != nil {
			return "", err
		}
		if !ok || r.Digest != want || !l.Retries(r) {
			return "", nil
		}
	}
	return want, nil
}

// standAside is asked after each apply, its report sent: when the node
// wants another version, delivered and not bad, it has the report on the
// wire and returns ErrStandAside if a launcher runs this process; without
// one, it says once that the version waits, and the host runs on.
func (a *Agent) standAside(nc *nats.Conn, version string) error {
	want, err := a.newVersion(version)
	if err != nil {
		a.log.Warn("whether another version waits is not known", "err", err)
		return nil
	}
	if want == "" {
		return nil
	}
	if !a.cfg.Launched {
		if a.versionWaits != want {
			a.versionWaits = want
			a.log.Warn("another version of mesh is delivered and waits: no launcher runs this process (run mesh host or mesh controller, not mesh serve)", "running", version[:12], "wanted", want[:min(12, len(want))])
		}
		return nil
	}
	if err := nc.Flush(); err != nil {
		a.log.Warn("the last report may not have reached the bus before standing aside", "err", err)
	}
	a.log.Info("standing aside for the version this node wants", "running", version[:12], "wanted", want[:min(12, len(want))])
	return fmt.Errorf("%w (%s)", ErrStandAside, want)
}
