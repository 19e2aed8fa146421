package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/urfave/cli/v2"
)

// The flags of a join: the token, given or in a file, and the address the
// node joins with. None of them is passed on once the join is made.
var joinFlagNames = []string{"join", "join-file", "address"}

func joinFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "join", Usage: "a token from mesh token create NODE (it is in the process list until the join is made: --join-file keeps it out)"},
		&cli.StringFlag{Name: "join-file", Usage: "a file holding a token from mesh token create NODE (for a service manager)"},
	}
}

// joining says whether c joins a mesh.
func joining(c *cli.Context) bool {
	return c.IsSet("join") || c.IsSet("join-file")
}

// joinToken is the token --join gives or --join-file holds: a token that
// cannot be read or parsed is a mistake in the call.
func joinToken(c *cli.Context) (spec.Token, error) {
	raw, flag := c.String("join"), "--join"
	if c.IsSet("join-file") {
		if c.IsSet("join") {
			return spec.Token{}, usagef("--join and --join-file are both given: give one; nothing was done")
		}
		path := c.String("join-file")
		flag = "--join-file " + path
		body, err := os.ReadFile(path)
		if err != nil {
			return spec.Token{}, usagef("--join-file: %v; nothing was done", err)
		}
		if raw = strings.TrimSpace(string(body)); raw == "" {
			return spec.Token{}, usagef("--join-file %s is empty: write the token from mesh token create NODE in it; nothing was done", path)
		}
	}
	tok, err := spec.ParseToken(raw)
	if err != nil {
		return spec.Token{}, usagef("%s: %v; nothing was done", flag, err)
	}
	return tok, nil
}

// joinThenRun joins the mesh the token names, in this process, and runs
// this process again with its arguments but the join's, so that no
// process of the host holds the token in its command line for its life:
// the launcher and its child start as they do on a joined machine. Every
// flag is checked first, so a bad one changes nothing.
func joinThenRun(c *cli.Context) error {
	if err := absDir(c); err != nil {
		return err
	}
	tok, err := joinToken(c)
	if err != nil {
		return err
	}
	stateDir := c.String("dir")
	dir := statedir.Host(stateDir)
	if err := host.CheckUnjoined(dir); err != nil {
		return joinedError(err, stateDir)
	}
	hs, err := checkHostFlags(c, stateDir)
	if err != nil {
		return err
	}
	log := hs.log
	// The resolver's address is bound by the host that runs after the
	// join: that it can be is checked here.
	if _, held, err := holdDNSFlag(c); err != nil {
		return err
	} else {
		held.Close()
	}
	address, err := addressOf(c)
	if err != nil {
		return err
	}
	if err := host.Join(c.Context, host.JoinConfig{Dir: dir, Token: tok, Address: address, Now: time.Now(), Waiting: joinWaiting(log)}); err != nil {
		return joinedError(err, stateDir)
	}
	log.Info("joined", "mesh", tok.Mesh, "node", tok.Node)
	args := withoutJoin(os.Args)
	if err := syscall.Exec("/proc/self/exe", args, os.Environ()); err != nil {
		return fmt.Errorf("joined as %q, but run mesh again without the token: %w; run it with %s", tok.Node, err, strings.Join(args, " "))
	}
	return nil
}

// joinedError is err, when it says that the host's directory holds a node
// already, as a mistake in the call that names the way out.
func joinedError(err error, stateDir string) error {
	var j *host.JoinedError
	if !errors.As(err, &j) {
		return err
	}
	node := "a node"
	if j.Node != "" {
		node = fmt.Sprintf("node %q of mesh %q", j.Node, j.Mesh)
	}
	if j.Removed {
		return usagef("%s holds %s, removed from the mesh: remove %s or give --dir a new directory, then join again; nothing was done", j.Dir, node, j.Dir)
	}
	return usagef("%s holds %s, joined already: run it without --join (mesh host --dir %s); to join again, remove %s or give --dir a new directory; nothing was done",
		j.Dir, node, stateDir, j.Dir)
}

// withoutJoin is args without the join's flags (joinFlagNames) and their
// values, in any form the flag package reads: --join=T, --join T, -join T.
// Everything after a "--" is an argument, kept.
func withoutJoin(args []string) []string {
	out := []string{args[0]}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		name, hasValue := "", false
		if strings.HasPrefix(a, "-") {
			name, _, hasValue = strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		}
		if !slices.Contains(joinFlagNames, name) {
			out = append(out, a)
			continue
		}
		if !hasValue {
			i++ // its value is the next argument
		}
	}
	return out
}

// joinWaiting says on log why a join sends its enrolment again.
func joinWaiting(log *slog.Logger) func(error) {
	return func(why error) {
		log.Warn("the controller cannot answer yet; sending the enrolment again", "why", why)
	}
}
