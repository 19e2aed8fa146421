package cli

import (
	"io"
	"time"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/launch"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/statedir"
	"github.com/urfave/cli/v2"
)

func genesisCommand() *cli.Command {
	return &cli.Command{
		Name:  "genesis",
		Usage: "create a mesh on this machine and run its controller and host",
		Description: `Creates the state directory (0700): the store, the signing key, the CA, the
operator's credential, and this machine's host as the mesh's first node.
Then runs the controller and the host in the foreground until SIGINT or
SIGTERM, as mesh controller does (a launcher, its child the controller).
Run it again later with mesh controller --dir D.

Example:
   mesh genesis --dir /var/lib/mesh --mesh home --node alpha`,
		Flags: append([]cli.Flag{
			dirFlag(),
			&cli.StringFlag{Name: "mesh", Usage: "the mesh's name (a DNS label)", Required: true},
			&cli.StringFlag{Name: "node", Usage: "this machine's node name (a DNS label)", Required: true},
			&cli.StringFlag{Name: "bus", Value: "0.0.0.0:4222", Usage: "where the bus listens, host:port (port 0: any free port, kept from then on)"},
			&cli.StringFlag{Name: "http", Value: "127.0.0.1:8480", Usage: "where /healthz, /metrics and /roots.pem listen, host:port (port 0: any free port)"},
			&cli.StringFlag{Name: "address", Usage: "where other nodes reach this one (default: the machine's primary address)"},
			advertiseFlag(),
			logFlag(),
			storeBusyFlag(),
			certLifetimeFlag(),
			healthyWithinFlag(false),
		}, hostFlags()...),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			if _, err := newLogger(c); err != nil {
				return err
			}
			dir := c.String("dir")
			meshName, node := c.String("mesh"), c.String("node")
			if err := spec.CheckName("mesh", meshName); err != nil {
				return usagef("--mesh: %v", err)
			}
			if err := spec.CheckName("node", node); err != nil {
				return usagef("--node: %v", err)
			}
			address, err := addressOf(c)
			if err != nil {
				return err
			}
			if err := daemon.RefuseExisting(dir); err != nil {
				return err
			}
			// Bind each address once before anything is written, so an address
			// that cannot be bound changes nothing on disk; a port 0 becomes the
			// port kept from then on. Each is held while the next are claimed,
			// so that two port 0s never come back as the same port.
			busAddr, busHeld, err := holdPort("--bus", c.String("bus"))
			if err != nil {
				return err
			}
			httpAddr, httpHeld, err := holdPort("--http", c.String("http"))
			if err != nil {
				busHeld.Close()
				return err
			}
			dnsAddr, dnsHeld, err := holdDNSFlag(c)
			if err != nil {
				busHeld.Close()
				httpHeld.Close()
				return err
			}
			// Held until the part that binds each starts, so that no other
			// process takes a port meanwhile.
			held := heldPorts{busHeld, httpHeld, dnsHeld}
			defer held.Close()
			if err := absRoot(c); err != nil {
				return err
			}
			if _, err := resolverConfig(c, dnsAddr); err != nil {
				return err
			}
			if _, err := hostConfig(c); err != nil {
				return err
			}
			if _, err := busURLs(busAddr, c.StringSlice("advertise")); err != nil {
				return err
			}
			kc, _, _, err := mergeConfig(c, dir)
			if err != nil {
				return err
			}
			if _, err := certLifetime(c); err != nil {
				return err
			}
			if c.Duration("healthy-within") < time.Second {
				return usagef("--healthy-within %s is shorter than a second: give how long a version has to be ready (1m0s)", c.Duration("healthy-within"))
			}
			if err := daemon.Create(c.Context, daemon.Genesis{Dir: dir, Mesh: meshName, Node: node, Address: address, Bus: busAddr}); err != nil {
				return err
			}
			if err := keepGenesis(dir, kc, spec.Addrs{Bus: busAddr, HTTP: httpAddr, DNS: dnsAddr}); err != nil {
				return err
			}
			// The controller is run as any later start runs it: by the
			// launcher, its child binding the addresses just kept (held
			// until now, so that no other process took one meanwhile).
			held.Close()
			held = nil
			return launchCommand(c, launch.Controller, "mesh", "node", "address", "bus", "http", "dns")
		},
	}
}

// keepGenesis writes what a new mesh's later starts read: D/config.yaml
// (the flags genesis was given) and D/addrs.json (where it binds), under
// the state directory's lock.
func keepGenesis(dir string, kc statedir.Config, addrs spec.Addrs) error {
	release, err := statedir.Lock(dir)
	if err != nil {
		return err
	}
	defer release()
	if err := statedir.WriteConfig(dir, kc); err != nil {
		return err
	}
	return statedir.WriteAddrs(dir, addrs)
}

// heldPorts are addresses bound to check them and keep them until the
// process that serves them starts.
type heldPorts []io.Closer

func (h heldPorts) Close() error {
	for _, c := range h {
		c.Close()
	}
	return nil
}
