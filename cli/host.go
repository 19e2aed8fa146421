package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/launch"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/urfave/cli/v2"
)

func hostCommand() *cli.Command {
	return &cli.Command{
		Name:  "host",
		Usage: "join a mesh with a token, and run this machine's host",
		Description: hostDescription + `

mesh host is a launcher: it runs the host as a child process, the version of
mesh the node wants when it is delivered whole, and falls back to the last
version that was ready when that one exits or is not ready within
--healthy-within (D/host/versions/launch.json says which). SIGINT and SIGTERM
reach the child; mesh host exits when it does, with its status.`,
		Flags: append(hostCommandFlags(), healthyWithinFlag(false)),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			if joining(c) {
				if err := checkHealthyWithin(c); err != nil {
					return err
				}
				return joinThenRun(c)
			}
			return launchCommand(c, launch.Host)
		},
	}
}

const hostDescription = `With --join, enrols this machine with the mesh the token names: the bus's
certificate chain is checked against the token's CA pin before anything is
sent, the node's key is made here and only its public half leaves the
machine. The credential is kept in D/host/node.creds (0600) and the pin in
D/host/state.json. Once joined, mesh host runs itself again without --join,
so the token is in no process's command line for the host's life;
--join-file FILE reads the token from FILE instead, for a service manager.
Then, and on every later start without --join, runs the host until SIGINT
or SIGTERM, reconnecting to the bus for ever.

Examples:
   mesh host --dir /var/lib/mesh --join mesh1.eyJ... --address 10.0.0.7
   mesh host --dir /var/lib/mesh --join-file /root/beta.token
   mesh host --dir /var/lib/mesh`

func hostCommandFlags() []cli.Flag {
	flags := append([]cli.Flag{dirFlag()}, joinFlags()...)
	flags = append(flags,
		&cli.StringFlag{Name: "address", Usage: "where other nodes reach this one (default: the machine's primary address)"},
		logFlag())
	return append(flags, hostFlags()...)
}

// serveHostCommand is mesh serve host: the host itself, what mesh host
// runs as its child.
func serveHostCommand() *cli.Command {
	return &cli.Command{
		Name:        "host",
		Usage:       "not for operators: the host mesh host runs",
		Description: hostDescription,
		Flags:       append(hostCommandFlags(), healthyWithinFlag(true)),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			if err := absDir(c); err != nil {
				return err
			}
			if joining(c) {
				return joinThenRun(c)
			}
			stateDir := c.String("dir")
			if c.IsSet("address") {
				return usagef("--address is given when joining (with --join); a joined host keeps the address it joined with")
			}
			if _, err := os.Stat(statedir.Host(stateDir)); errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%s holds no joined host: join a mesh first: mesh host --dir %s --join TOKEN", stateDir, stateDir)
			}
			release, err := statedir.Lock(stateDir)
			if err != nil {
				return err
			}
			defer release()
			hs, err := checkHostFlags(c, stateDir)
			if err != nil {
				return err
			}
			kc, changes, log, cfg := hs.kept, hs.changes, hs.log, hs.cfg
			pipe, err := readyPipe()
			if err != nil {
				return err
			}
			cfg.Launched = pipe != nil
			dnsAddr, dnsHeld, handed, err := claimDNS(c)
			if err != nil {
				return err
			}
			kc["dns"], kc["root"] = []string{dnsAddr}, []string{c.String("root")}
			dnsCfg, _ := resolverConfig(c, dnsAddr)
			dnsCfg.Held, dnsCfg.HandOver = launch.ChildDNS(handed)
			if subnetChanged(changes) {
				if err := daemon.CheckSubnetMove(c.Context, stateDir, cfg); err != nil {
					return err
				}
			}
			if err := statedir.WriteConfig(stateDir, kc); err != nil {
				return err
			}
			logChanges(log, stateDir, changes)
			node, err := daemon.NewNode(daemon.NodeConfig{Dir: stateDir, Host: cfg, Resolver: dnsCfg, HeldDNS: dnsHeld}, log)
			if err != nil {
				return err
			}
			sayReady(c.Context, pipe, node.Ready())
			err = node.Run(c.Context)
			if errors.Is(err, host.ErrRemoved) {
				if err := host.MarkRemoved(statedir.Host(stateDir), time.Now()); err != nil {
					log.Error("the node was removed, and a join into its directory will not be told", "err", err)
				}
				return removedError(node.Name(), stateDir)
			}
			return err
		},
	}
}

// hostStart is what a host's flags and D/config.yaml come to, checked.
type hostStart struct {
	kept    statedir.Config
	changes []configChange
	log     *slog.Logger
	cfg     host.Config
}

// checkHostFlags merges c's flags with D/config.yaml and checks every one
// a host runs with, before anything is written or joined: a bad one is
// refused by name (from the file, saying so).
func checkHostFlags(c *cli.Context, stateDir string) (hostStart, error) {
	kc, changes, fromFile, err := mergeConfig(c, stateDir)
	if err != nil {
		return hostStart{}, err
	}
	log, err := newLogger(c)
	if err != nil {
		return hostStart{}, fromFileHint(err, fromFile, stateDir)
	}
	if err := absRoot(c); err != nil {
		return hostStart{}, fromFileHint(err, fromFile, stateDir)
	}
	if _, err := resolverConfig(c, c.String("dns")); err != nil {
		return hostStart{}, fromFileHint(err, fromFile, stateDir)
	}
	cfg, err := hostConfig(c)
	if err != nil {
		return hostStart{}, fromFileHint(err, fromFile, stateDir)
	}
	return hostStart{kept: kc, changes: changes, log: log, cfg: cfg}, nil
}

// removedError says that node was removed from the mesh and how this
// machine joins it again: exit code 3.
func removedError(node, dir string) error {
	return fmt.Errorf("node %q: %w; to join again, run mesh token create %s on the controller, then mesh host --dir %s --join TOKEN here after removing %s (or give --dir a new directory)",
		node, host.ErrRemoved, node, dir, statedir.Host(dir))
}
