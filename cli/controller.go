package cli

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/launch"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/urfave/cli/v2"
)

func controllerCommand() *cli.Command {
	return &cli.Command{
		Name:  "controller",
		Usage: "run an existing mesh again: its controller and its host",
		Description: controllerDescription + `

mesh controller is a launcher: it runs the controller as a child process, the
version of mesh the node wants when it is delivered whole, and falls back to
the last version that was ready when that one exits or is not ready within
--healthy-within, the store put back as it was before that version ran
(D/host/versions/launch.json says which). SIGINT and SIGTERM reach the
child; mesh controller exits when it does, with its status.

With --join TOKEN (from mesh token create --controller NODE on a
controller of the mesh), --bus, --cluster and --dir a new directory, it
first joins the mesh as one of its controllers, with its node NODE: the
controller that answers seals the keys the controllers share to this
machine and adds its bus to the controllers' cluster; then it runs as
mesh controller --dir D without the token's flags.

Example of a join:
   mesh controller --dir /var/lib/mesh --join TOKEN --bus 0.0.0.0:4222 --advertise 192.0.2.11 --cluster 192.0.2.11:6222`,
		Flags: append(append(controllerCommandFlags(), healthyWithinFlag(false)), controllerJoinFlags()...),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			if joining(c) {
				return controllerJoinThenRun(c)
			}
			if c.IsSet("address") {
				return usagef("--address is a join's flag: give it with --join")
			}
			if _, err := pprofAddr(c); err != nil {
				return err
			}
			if c.Int("memory-limit") < 0 {
				return usagef("--memory-limit %d: give a size in MiB, or 0 for none", c.Int("memory-limit"))
			}
			// A controller removed from its cluster does not run again: said
			// here, not by a child that fails before it is ready (which the
			// launcher would take for a bad version).
			if err := absDir(c); err != nil {
				return err
			}
			if err := daemon.CheckNotRemoved(c.String("dir")); err != nil {
				return err
			}
			return launchCommand(c, launch.Controller)
		},
	}
}

const controllerDescription = `Runs the mesh kept in --dir on the addresses it bound before (from
D/addrs.json), so hosts find the bus again with no action, and with the
host flags it was started with (from D/config.yaml). A flag given here
overrides the file and is kept from then on; --bus and --http rebind and
are kept in D/addrs.json.

Example:
   mesh controller --dir /var/lib/mesh
   mesh controller --dir /var/lib/mesh --bus 0.0.0.0:4222 --advertise 192.0.2.10`

func controllerCommandFlags() []cli.Flag {
	return append([]cli.Flag{
		dirFlag(),
		&cli.StringFlag{Name: "bus", Usage: "rebind the bus, host:port (default: where it bound before)"},
		&cli.StringFlag{Name: "http", Usage: "rebind /healthz, /metrics and /roots.pem, host:port (default: where it bound before)"},
		advertiseFlag(),
		clusterFlag(),
		logFlag(),
		storeBusyFlag(),
		certLifetimeFlag(),
		pprofFlag(),
		memoryLimitFlag(),
	}, hostFlags()...)
}

// serveControllerCommand is mesh serve controller: the controller's
// machine itself, what mesh controller runs as its child (and what mesh
// genesis runs in its own process once it has made the mesh).
func serveControllerCommand() *cli.Command {
	return &cli.Command{
		Name:        "controller",
		Usage:       "not for operators: the controller mesh controller runs",
		Description: controllerDescription,
		Flags:       append(controllerCommandFlags(), healthyWithinFlag(true)),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			if err := absDir(c); err != nil {
				return err
			}
			dir := c.String("dir")
			prof, err := pprofAddr(c)
			if err != nil {
				return err
			}
			ok, err := mesh.IsMesh(statedir.Controller(dir))
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%s holds no mesh: create one with mesh genesis --dir %s --mesh NAME --node NAME", dir, dir)
			}
			release, err := statedir.Lock(dir)
			if err != nil {
				return err
			}
			defer release()
			addrs, err := statedir.ReadAddrs(dir)
			if err != nil {
				return err
			}
			// A mesh made before D/config.yaml: its resolver binds where it
			// bound before, unless told otherwise.
			if file, err := readConfig(dir); err == nil && file["dns"] == nil && !c.IsSet("dns") && addrs.DNS != "" {
				if err := c.Set("dns", addrs.DNS); err != nil {
					return err
				}
			}
			cs, err := checkControllerFlags(c, dir)
			if err != nil {
				return err
			}
			kc, changes, log := cs.kept, cs.changes, cs.log
			if err := applyMemoryLimit(c, log); err != nil {
				return err
			}
			held, err := rebind(c, log, &addrs)
			if err != nil {
				return err
			}
			var handed []resolver.Held
			if addrs.DNS, held.DNS, handed, err = claimDNS(c); err != nil {
				return err
			}
			kc["dns"], kc["root"] = []string{addrs.DNS}, []string{c.String("root")}
			dnsCfg, _ := resolverConfig(c, addrs.DNS)
			dnsCfg.Held, dnsCfg.HandOver = launch.ChildDNS(handed)
			hostCfg := cs.host
			pipe, err := readyPipe()
			if err != nil {
				return err
			}
			hostCfg.Launched = pipe != nil
			advertise, err := busURLs(addrs.Bus, c.StringSlice("advertise"))
			if err != nil {
				return fromFileHint(err, cs.fromFile, dir)
			}
			if err := checkClusterFlag(c); err != nil {
				return fromFileHint(err, cs.fromFile, dir)
			}
			if advertise, err = keepCluster(c, dir, advertise); err != nil {
				return err
			}
			if subnetChanged(changes) {
				if err := daemon.CheckSubnetMove(c.Context, dir, hostCfg); err != nil {
					return err
				}
			}
			m, err := daemon.NewMesh(daemon.MeshConfig{
				Dir: dir, Addrs: addrs, Advertise: advertise, Host: hostCfg, Resolver: dnsCfg,
				StoreBusyTimeout: cs.busy, CertLifetime: cs.lifetime, Held: held, Pprof: prof,
			}, log)
			if err != nil {
				return err
			}
			if err := daemon.FollowBus(dir, addrs.Bus); err != nil {
				return err
			}
			if err := statedir.WriteConfig(dir, kc); err != nil {
				return err
			}
			logChanges(log, dir, changes)
			sayReady(c.Context, pipe, m.Ready())
			return m.Run(c.Context)
		},
	}
}

// controllerStart is what a controller's flags and D/config.yaml come to,
// checked.
type controllerStart struct {
	kept     statedir.Config
	changes  []configChange
	fromFile bool
	log      *slog.Logger
	host     host.Config
	lifetime time.Duration
	busy     time.Duration
}

// checkControllerFlags merges c's flags with D/config.yaml and checks
// every one a controller runs with that binds nothing, before anything is
// written: a bad one is refused by name (from the file, saying so). The
// launcher runs it too, so that its child never fails for one.
func checkControllerFlags(c *cli.Context, dir string) (controllerStart, error) {
	kc, changes, fromFile, err := mergeConfig(c, dir)
	if err != nil {
		return controllerStart{}, err
	}
	cs := controllerStart{kept: kc, changes: changes, fromFile: fromFile}
	if cs.log, err = newLogger(c); err != nil {
		return cs, fromFileHint(err, fromFile, dir)
	}
	if err := absRoot(c); err != nil {
		return cs, fromFileHint(err, fromFile, dir)
	}
	if _, err := resolverConfig(c, c.String("dns")); err != nil {
		return cs, fromFileHint(err, fromFile, dir)
	}
	if cs.host, err = hostConfig(c); err != nil {
		return cs, fromFileHint(err, fromFile, dir)
	}
	if _, err := busURLs(c.String("bus"), c.StringSlice("advertise")); err != nil {
		return cs, fromFileHint(err, fromFile, dir)
	}
	if cs.lifetime, err = certLifetime(c); err != nil {
		return cs, fromFileHint(err, fromFile, dir)
	}
	if cs.busy, err = storeBusyTimeout(c); err != nil {
		return cs, err
	}
	return cs, nil
}

// rebind takes --bus and --http at a controller's start: each is bound to
// check it (a port 0 becomes the port kept) and held for the daemon, and
// addrs records it.
func rebind(c *cli.Context, log *slog.Logger, addrs *spec.Addrs) (daemon.Held, error) {
	var held daemon.Held
	for _, f := range []struct {
		flag string
		addr *string
		held *io.Closer
	}{{"bus", &addrs.Bus, &held.Bus}, {"http", &addrs.HTTP, &held.HTTP}} {
		if !c.IsSet(f.flag) {
			continue
		}
		bound, l, err := holdPort("--"+f.flag, c.String(f.flag))
		if err != nil {
			return held, err
		}
		*f.held = l
		if bound != *f.addr {
			log.Info("rebinding", "flag", "--"+f.flag, "was", *f.addr, "now", bound)
			*f.addr = bound
		}
	}
	return held, nil
}
