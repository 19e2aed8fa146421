package launch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mesh-fleet/mesh/release"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
)

// readyFD is the child's descriptor of the ready pipe: its first
// ExtraFile.
const readyFD = 3

// outcome is how a child ended.
type outcome struct {
	ready bool   // it reported ready
	code  int    // its exit status (128+N when signal N ended it)
	why   string // for one not ready: what happened, for its Fallback
}

// runChild runs p until it exits: it is given until HealthyWithin to say it
// is ready, and SIGTERM when ctx ends. An error is the launcher's own
// failure; a version that cannot be started is an outcome like an exit.
func (l *Launcher) runChild(ctx context.Context, p pick) (outcome, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return outcome{}, fmt.Errorf("make the ready pipe: %w", err)
	}
	defer r.Close()
	args := []string{"serve", l.cfg.Mode, "--dir", l.cfg.Dir}
	if l.given {
		args = append(args, l.cfg.Args...)
	}
	cmd := exec.Command(p.path, args...)
	cmd.Args[0] = "mesh" // what ps shows, whichever file runs
	cmd.Stdout, cmd.Stderr = l.cfg.Stdout, l.cfg.Stderr
	cmd.ExtraFiles = append([]*os.File{w}, l.dns...)
	cmd.Env = append(withoutOurs(os.Environ()), spec.ReadyFDEnv+"="+strconv.Itoa(readyFD))
	// The child's version is the digest of the file it runs, hashed here
	// already (verified, or the launcher's own): handed over, not read again.
	// Without the entry the child hashes its file itself.
	if handoff, err := release.Handoff(p.path); err == nil {
		cmd.Env = append(cmd.Env, handoff)
	}
	if len(l.dns) == 2 {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%s,%d,%d", spec.HeldDNSEnv, l.cfg.DNS, readyFD+1, readyFD+2))
	}
	hand := l.handDNS(cmd)
	// The child dies with the launcher, however the launcher ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started, exited := make(chan error, 1), make(chan error, 1)
	go func() {
		// Pdeathsig follows the thread that forked the child, not the
		// process: this goroutine keeps its thread until the child is
		// reaped, and the thread ends with it.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	err = <-started
	w.Close()
	hand.started(l, err == nil)
	if err != nil {
		if p.digest == p.fallback {
			return outcome{}, fmt.Errorf("start %s: %w", p.path, err)
		}
		return outcome{code: -1, why: fmt.Sprintf("does not start: %v", err)}, nil
	}
	readyLine, readDone := make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(readDone)
		line, _ := bufio.NewReader(io.LimitReader(r, 64)).ReadString('\n')
		if line == "ready\n" {
			readyLine <- struct{}{}
		}
	}()
	healthy := time.NewTimer(l.cfg.HealthyWithin)
	defer healthy.Stop()
	var out outcome
	done, stopping := ctx.Done(), false
	for {
		select {
		case <-readyLine:
			l.becameReady(p, &out)
		case <-healthy.C:
			if out.ready || stopping {
				continue
			}
			out.why = fmt.Sprintf("not ready within %s", l.cfg.HealthyWithin)
			stopping = true
			go l.stop(cmd, exited)
		case <-done:
			done, stopping = nil, true
			l.log.Debug("stopping the child", "version", short(p.digest))
			cmd.Process.Signal(syscall.SIGTERM)
		case err := <-exited:
			exited <- err // for a stop under way
			hand.exited(l)
			// A child that said ready and exited at once: its line is read
			// before the exit is judged.
			select {
			case <-readDone:
			case <-time.After(time.Second):
			}
			select {
			case <-readyLine:
				l.becameReady(p, &out)
			default:
			}
			out.code = exitCode(cmd, err)
			if !out.ready && out.why == "" {
				out.why = fmt.Sprintf("exited with status %d before it was ready", out.code)
			}
			return out, nil
		}
	}
}

func (l *Launcher) becameReady(p pick, out *outcome) {
	if out.ready {
		return
	}
	out.ready = true
	if err := l.ready(p); err != nil {
		l.log.Error("the version is ready and not recorded as good", "version", short(p.digest), "err", err)
	}
}

// stop asks a child to stop, and kills it if it has not within StopGrace.
func (l *Launcher) stop(cmd *exec.Cmd, exited chan error) {
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err
	case <-time.After(l.cfg.StopGrace):
		cmd.Process.Kill()
	}
}

// waitForTheLastChild waits until no process holds D/.lock: a child of a
// launcher that was killed dies with it, a moment later. One that holds it
// under the parent it had when it took it (a genesis, another launcher's
// child) is another process running on D, and so is one that holds it for
// LockWait: an error, at once.
func (l *Launcher) waitForTheLastChild(ctx context.Context) error {
	if !l.made() {
		return nil
	}
	deadline := time.Now().Add(l.cfg.LockWait)
	for {
		free, err := statedir.Free(l.cfg.Dir)
		if err != nil || free {
			return err
		}
		if time.Now().After(deadline) || !statedir.HolderOrphaned(l.cfg.Dir) {
			// Not a child of this launcher's: say who, and start nothing
			// (a version that failed for it would be called bad).
			release, err := statedir.Lock(l.cfg.Dir)
			if err == nil {
				release() // let go just now
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func exitCode(cmd *exec.Cmd, err error) int {
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// withoutOurs is env without what a launcher hands its child.
func withoutOurs(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, spec.ReadyFDEnv+"=") && !strings.HasPrefix(e, spec.HeldDNSEnv+"=") &&
			!strings.HasPrefix(e, spec.HandOverDNSEnv+"=") && !strings.HasPrefix(e, spec.AttachedDNSEnv+"=") && !strings.HasPrefix(e, release.HandoffEnv+"=") {
			out = append(out, e)
		}
	}
	return out
}
