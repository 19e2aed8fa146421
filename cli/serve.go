package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/launch"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/urfave/cli/v2"
)

// mesh host and mesh controller are launchers (package launch): each runs
// this binary, or the version its node wants, as a child, mesh serve
// host|controller, which is what they ran themselves before. mesh serve is not for operators: it is hidden from --help.

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:   "serve",
		Hidden: true,
		Usage:  "not for operators: what mesh host and mesh controller run as their child",
		Description: `mesh host and mesh controller run mesh serve host and mesh serve controller
as a child, and start the version of mesh the node wants in its place when
it stands aside. Run on its own, it serves without falling back, and a new
version delivered waits until mesh host or mesh controller runs.`,
		Subcommands: []*cli.Command{serveHostCommand(), serveControllerCommand()},
	}
}

// healthyWithinFlag is how long a launcher gives a version to be ready:
// the launcher's flag, kept in D/config.yaml by its child.
func healthyWithinFlag(hidden bool) cli.Flag {
	return &cli.DurationFlag{Name: "healthy-within", Value: launch.DefaultHealthyWithin, Hidden: hidden,
		Usage: "how long a version of mesh has to be ready (its parts up, its first heartbeat sent) before the launcher falls back to the last good one (" + healthyWithinBounds.String() + ")"}
}

// readyPipe is the descriptor a launcher handed this process
// (spec.ReadyFDEnv), or nil when no launcher runs it. It is not passed on
// to the programs this process runs.
func readyPipe() (*os.File, error) {
	v := os.Getenv(spec.ReadyFDEnv)
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q is not a descriptor a launcher hands its child", spec.ReadyFDEnv, v)
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), "ready"), nil
}

// sayReady writes "ready" on pipe once ready is closed, and closes it;
// nothing without a pipe.
func sayReady(ctx context.Context, pipe *os.File, ready <-chan struct{}) {
	if pipe == nil {
		return
	}
	go func() {
		defer pipe.Close()
		select {
		case <-ready:
			pipe.Write([]byte("ready\n"))
		case <-ctx.Done():
		}
	}()
}

// heldDNS are the resolver's sockets a launcher handed this process
// (spec.HeldDNSEnv) when they are addr's; nil when none were handed, or
// they are another address's (closed then: this process binds its own).
func heldDNS(addr string) (*resolver.Held, error) {
	v := os.Getenv(spec.HeldDNSEnv)
	if v == "" {
		return nil, nil
	}
	parts := strings.Split(v, ",")
	var fds [2]int
	for i := range fds {
		fd, err := strconv.Atoi(parts[min(i+1, len(parts)-1)])
		if len(parts) != 3 || err != nil || fd < 3 {
			return nil, fmt.Errorf("%s=%q is not what a launcher hands its child (address,UDP descriptor,TCP descriptor)", spec.HeldDNSEnv, v)
		}
		syscall.CloseOnExec(fd)
		fds[i] = fd
	}
	uf, tf := os.NewFile(uintptr(fds[0]), "dns-udp"), os.NewFile(uintptr(fds[1]), "dns-tcp")
	defer uf.Close()
	defer tf.Close()
	if parts[0] != addr {
		return nil, nil
	}
	pc, err := net.FilePacketConn(uf)
	if err != nil {
		return nil, fmt.Errorf("the resolver's UDP socket handed by the launcher: %w", err)
	}
	ln, err := net.FileListener(tf)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("the resolver's TCP socket handed by the launcher: %w", err)
	}
	return &resolver.Held{Addr: addr, UDP: pc, TCP: ln}, nil
}

// claimDNS is holdDNSFlag, unless the launcher handed this process --dns's
// sockets: then those are served, and nothing is held apart.
func claimDNS(c *cli.Context) (string, io.Closer, []resolver.Held, error) {
	h, err := heldDNS(c.String("dns"))
	if err != nil {
		return "", nil, nil, err
	}
	if h != nil {
		return h.Addr, nil, []resolver.Held{*h}, nil
	}
	addr, held, err := holdDNSFlag(c)
	return addr, held, nil, err
}

// launchCommand runs the launcher for mode on c's --dir: the flags c was
// given (those a child of mode takes) go to the children until one is
// ready. --healthy-within and --log-level not given come from
// D/config.yaml. Every flag, given or kept, is checked as the child checks
// it before any child starts (checkChildFlags).
func launchCommand(c *cli.Context, mode string, skip ...string) error {
	if err := absDir(c); err != nil {
		return err
	}
	dir := c.String("dir")
	kept, _ := statedir.ReadConfig(dir)
	fromFile := false
	for _, name := range []string{"healthy-within", "log-level"} {
		if v := kept[name]; !c.IsSet(name) && len(v) == 1 {
			if err := c.Set(name, v[0]); err != nil {
				return usagef("%s: %s %q: %v", dir, name, v[0], err)
			}
			fromFile = true
		}
	}
	log, err := newLogger(c)
	if err != nil {
		return fromFileHint(err, fromFile, dir)
	}
	if err := checkHealthyWithin(c); err != nil {
		return fromFileHint(err, fromFile, dir)
	}
	// The children's flags are those given, taken before the check below
	// fills c with D/config.yaml's.
	args, dns := givenFlags(c, append(skip, "dir")...), launcherDNS(c, kept)
	if err := checkChildFlags(c, mode, dir); err != nil {
		return err
	}
	l, err := launch.New(launch.Config{Dir: dir, Mode: mode, Args: args, DNS: dns,
		HealthyWithin: c.Duration("healthy-within"), Stdout: rawOf(c.App.Writer), Stderr: rawOf(c.App.ErrWriter)}, log.With("component", "launcher"))
	if err != nil {
		return err
	}
	return l.Run(c.Context)
}

// checkChildFlags refuses, in a launcher, what its child of mode would
// refuse of its flags and D/config.yaml, with the child's own check,
// before any child starts: a child that fails to start is taken for a bad
// version, and a version delivered would be marked bad for the operator's
// mistake.
func checkChildFlags(c *cli.Context, mode, dir string) error {
	var cfg host.Config
	switch mode {
	case launch.Host:
		hs, err := checkHostFlags(c, dir)
		if err != nil {
			return err
		}
		cfg = hs.cfg
	case launch.Controller:
		cs, err := checkControllerFlags(c, dir)
		if err != nil {
			return err
		}
		cfg = cs.host
	}
	if cfg.Docker != nil {
		cfg.Docker.Close()
	}
	return nil
}

// launcherDNS is the resolver address the launcher holds and hands to each
// child: --dns as given, else as D/config.yaml keeps it, else the flag's
// default, the address the child binds when it is given none. A first
// start (a join) given no --dns holds it too, so the first swap after a
// join is not the one that drops queries.
func launcherDNS(c *cli.Context, kept map[string][]string) string {
	if v := kept["dns"]; !c.IsSet("dns") && len(v) == 1 {
		return v[0]
	}
	return c.String("dns")
}

// givenFlags are the flags c was given, as arguments, but those in skip.
func givenFlags(c *cli.Context, skip ...string) []string {
	var args []string
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if !c.IsSet(name) || slices.Contains(skip, name) {
			continue
		}
		switch f.(type) {
		case *cli.StringSliceFlag:
			for _, v := range c.StringSlice(name) {
				args = append(args, "--"+name+"="+v)
			}
		case *cli.DurationFlag:
			args = append(args, "--"+name+"="+c.Duration(name).String())
		case *cli.BoolFlag:
			args = append(args, "--"+name+"="+strconv.FormatBool(c.Bool(name)))
		default:
			args = append(args, "--"+name+"="+c.String(name))
		}
	}
	return args
}
