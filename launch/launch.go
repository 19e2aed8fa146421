// Package launch is a machine's launcher (docs/design.md, "The launcher"):
// mesh host and mesh controller run the version of mesh the node wants as
// a child process (mesh serve), fall back to the last good one when it
// does not come up, start the wanted one when the child stands aside for
// it, and keep their record in D/host/versions/launch.json.
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
)

// The modes a child serves.
const (
	Host       = "host"
	Controller = "controller"
)

// DefaultHealthyWithin is how long a version has to report ready before
// the launcher gives up on it, unless Config says otherwise.
const DefaultHealthyWithin = 60 * time.Second

// Config is a launcher.
type Config struct {
	// Dir is the state directory D.
	Dir string
	// Mode is what the child serves: Host or Controller.
	Mode string
	// Args are the flags the launcher was given, passed to each child
	// until one is ready; by then D/config.yaml keeps them, and a later
	// child is given --dir alone (a port 0 is not rebound elsewhere). They
	// hold no join token: mesh host joins before it is a launcher.
	Args []string
	// HealthyWithin is how long a child has to report ready; zero means
	// DefaultHealthyWithin.
	HealthyWithin time.Duration
	// Self is the launcher's own executable, the version of last resort;
	// empty means os.Executable.
	Self string
	// Stdout and Stderr are the children's (nil: the launcher's own).
	Stdout, Stderr io.Writer
	// StopGrace is how long a child not ready in time is given to stop
	// after SIGTERM before it is killed; zero means 10 s.
	StopGrace time.Duration
	// LockWait is how long the launcher waits for D/.lock to be let go by
	// the child of a launcher killed before it; zero means 10 s.
	LockWait time.Duration
	// DNS is the machine's resolver address, host:port: the launcher binds
	// it once and hands each child a copy of its sockets
	// (spec.HeldDNSEnv), so that queries wait in them while one child
	// stands aside for the next, and are answered. A port 0 is the port
	// the launcher gets, and an argument --dns=DNS in Args is rewritten to
	// it. Empty: each child binds its own.
	DNS string
}

// Launcher runs a machine's mesh as a child process.
type Launcher struct {
	cfg        Config
	log        *slog.Logger
	selfDigest string
	versions   string // D/host/versions
	launch     spec.Launch
	// dns are the resolver's sockets the launcher holds (nil: none), as
	// files handed to each child.
	dns []*os.File
	// attached are the addresses the last child's resolver attached, as it
	// handed them over, for the next child.
	attached []attachedDNS
	// given says that cfg.Args still go to the next child: none has been
	// ready yet in this launcher's life.
	given bool
}

// ExitError is a child that ended the launcher: a ready child that exited
// for another reason than standing aside, or the version of last resort
// that exited before it was ready. The launcher exits with its status.
type ExitError struct {
	Digest string
	Code   int
}

func (e *ExitError) Error() string {
	return fmt.Sprintf("mesh %s exited with status %d", short(e.Digest), e.Code)
}

// New checks cfg and reads the launcher's own executable; it starts
// nothing.
func New(cfg Config, log *slog.Logger) (*Launcher, error) {
	if cfg.Dir == "" {
		return nil, errors.New("a launcher needs its state directory")
	}
	if cfg.Mode != Host && cfg.Mode != Controller {
		return nil, fmt.Errorf("a launcher runs a host or a controller, not %q", cfg.Mode)
	}
	if cfg.HealthyWithin <= 0 {
		cfg.HealthyWithin = DefaultHealthyWithin
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	if cfg.LockWait <= 0 {
		cfg.LockWait = 10 * time.Second
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	if cfg.Stderr == nil {
		cfg.Stderr = os.Stderr
	}
	if cfg.Self == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the launcher's own executable: %w", err)
		}
		cfg.Self = self
	}
	digest, err := release.DigestKept(cfg.Self, statedir.ExecutableDigest(cfg.Dir))
	if err != nil {
		return nil, err
	}
	return &Launcher{cfg: cfg, log: log, selfDigest: digest, given: true,
		versions: filepath.Join(statedir.Host(cfg.Dir), spec.VersionsDir)}, nil
}

// Run runs children until ctx ends (SIGTERM reaches the child, and Run
// waits for it) or a child ends the launcher (an *ExitError).
func (l *Launcher) Run(ctx context.Context) error {
	// A machine a join has not made yet has no launcher to keep
	// out, and nothing is written there: the child makes it, or says why
	// it cannot.
	if l.made() {
		release, err := statedir.LockLaunch(l.cfg.Dir)
		if err != nil {
			return err
		}
		defer release()
	}
	var err error
	if l.launch, err = readLaunch(l.versions); err != nil {
		return err
	}
	if err := l.waitForTheLastChild(ctx); err != nil {
		return err
	}
	l.holdDNS()
	defer func() {
		for _, f := range l.dns {
			f.Close()
		}
		closeAttached(l.attached)
	}()
	if err := l.finishRestore(); err != nil {
		return err
	}
	aside := "" // the version that last stood aside
	for {
		if ctx.Err() != nil {
			return nil
		}
		p, err := l.choose()
		if err != nil {
			return err
		}
		if p.digest == aside {
			// It stood aside for a version the launcher will not start: it
			// runs again, but not in a tight loop if it does so again.
			l.log.Warn("the version that stood aside runs again: the one it stood aside for cannot", "version", short(p.digest), "why", p.why)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Second):
			}
		}
		aside = ""
		if err := l.beforeTrial(ctx, p); err != nil {
			return err
		}
		if l.launch.Running != p.digest {
			l.launch.Running = p.digest
			if err := l.save(); err != nil {
				return err
			}
		}
		// A start of the version that ran before, or of the launcher's own
		// with nothing else on offer, is routine; any other is news.
		level := slog.LevelDebug
		if p.digest != p.fallback || strings.Contains(p.why, ";") {
			level = slog.LevelInfo
		}
		l.log.Log(ctx, level, "starting", "version", short(p.digest), "from", p.path, "why", p.why)
		out, err := l.runChild(ctx, p)
		if err != nil {
			return err
		}
		switch {
		case out.code == spec.ExitRestart && ctx.Err() == nil:
			// Ready or not: the peer set changed while it came up.
			l.log.Info("the child starts again: the controllers' peer set changed", "version", short(p.digest))
			continue
		case out.ready && out.code == spec.ExitStandAside && ctx.Err() == nil:
			l.log.Info("the child stood aside for the version its node wants", "version", short(p.digest))
			aside = p.digest
			continue
		case ctx.Err() != nil:
			if out.code != 0 {
				return &ExitError{Digest: p.digest, Code: out.code}
			}
			return nil
		case out.ready:
			if out.code == 0 {
				return nil
			}
			return &ExitError{Digest: p.digest, Code: out.code}
		case p.digest == p.fallback:
			// Nothing older to fall back to: the launcher stops, and what
			// runs it (systemd) decides.
			return &ExitError{Digest: p.digest, Code: out.code}
		}
		if err := l.giveUp(p, out.why); err != nil {
			return err
		}
	}
}

// giveUp marks p bad with why and, for a controller, puts back the store
// as it was before p ran.
func (l *Launcher) giveUp(p pick, why string) error {
	l.log.Error("falling back: the version did not come up", "version", short(p.digest), "reason", why, "to", short(p.fallback))
	if l.launch.Bad == nil {
		l.launch.Bad = map[string]spec.Fallback{}
	}
	l.launch.Bad[p.digest] = spec.Fallback{Digest: p.digest, Reason: why, At: time.Now().UTC(), Retry: l.launch.Retried[p.digest]}
	if err := l.save(); err != nil {
		return err
	}
	return l.finishRestore()
}

// ready records that p reported ready: it is the version to fall back to
// from now on, and no longer bad.
func (l *Launcher) ready(p pick) error {
	l.given = false
	was := l.launch.Good
	l.launch.Good = p.digest
	delete(l.launch.Bad, p.digest)
	if err := l.save(); err != nil {
		return err
	}
	if was != "" && was != p.digest {
		l.log.Info("a new version is ready, and good from now on", "version", short(p.digest), "was", short(was))
	}
	return l.dropSnapshot(p.digest)
}

// save writes launch.json, once the machine is made.
func (l *Launcher) save() error {
	if !l.made() {
		return nil
	}
	return writeLaunch(l.versions, l.launch)
}

// made says whether D holds a machine: its host's directory (a
// controller's machine has one too).
func (l *Launcher) made() bool {
	_, err := os.Stat(statedir.Host(l.cfg.Dir))
	return err == nil
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// holdDNS binds the resolver's address, to hand its sockets to each child.
// An address that cannot be bound is the child's to refuse, by name: the
// launcher holds nothing then.
func (l *Launcher) holdDNS() {
	if l.cfg.DNS == "" {
		return
	}
	host, port, err := net.SplitHostPort(l.cfg.DNS)
	if err != nil {
		return
	}
	pc, ln, err := resolver.Bind(l.cfg.DNS)
	if err != nil {
		l.log.Warn("the resolver's address is not held across a swap", "dns", l.cfg.DNS, "err", err)
		return
	}
	defer pc.Close()
	defer ln.Close()
	if port == "0" {
		// A port 0 is taken once, here: the children are told the port it
		// got, which the first keeps in D/config.yaml.
		bound := net.JoinHostPort(host, strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))
		for i, a := range l.cfg.Args {
			if a == "--dns="+l.cfg.DNS {
				l.cfg.Args[i] = "--dns=" + bound
			}
		}
		l.cfg.DNS = bound
	}
	uf, err := pc.(*net.UDPConn).File()
	if err != nil {
		l.log.Warn("the resolver's address is not held across a swap", "dns", l.cfg.DNS, "err", err)
		return
	}
	tf, err := ln.(*net.TCPListener).File()
	if err != nil {
		uf.Close()
		l.log.Warn("the resolver's address is not held across a swap", "dns", l.cfg.DNS, "err", err)
		return
	}
	l.dns = []*os.File{uf, tf}
}
