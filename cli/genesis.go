package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/host"
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
SIGTERM, in this process, its addresses held from the moment they are
checked until they are served. When a roll delivers this node another
version, genesis stops the mesh and hands over (in the same process, by
exec) to mesh controller --dir D: a launcher, which runs the version the
node wants and falls back from it if it does not come up. mesh controller
--dir D is how the mesh runs again after a stop (mesh install's unit runs
it).

Example:
   mesh genesis --dir /var/lib/mesh --mesh home --node alpha`,
		Flags: append([]cli.Flag{
			dirFlag(),
			&cli.StringFlag{Name: "mesh", Usage: "the mesh's name (a DNS label)", Required: true},
			&cli.StringFlag{Name: "node", Usage: "this machine's node name (a DNS label)", Required: true},
			&cli.StringFlag{Name: "bus", Value: "0.0.0.0:4222", Usage: "where the bus listens, host:port (port 0: any free port, kept from then on)"},
			&cli.StringFlag{Name: "http", Value: "127.0.0.1:8480", Usage: "where /healthz, /metrics and /roots.pem listen, host:port (port 0: any free port)"},
			&cli.StringFlag{Name: "address", Usage: "where other nodes reach this one (default: the machine's primary address)"},
			&cli.StringFlag{Name: "overlay", Usage: "turn the overlay on with this private range, CIDR (10.88.0.0/16): every node gets an address on it and its names resolve to it"},
			advertiseFlag(),
			clusterFlag(),
			logFlag(),
			storeBusyFlag(),
			certLifetimeFlag(),
			healthyWithinFlag(false),
			pprofFlag(),
			memoryLimitFlag(),
		}, hostFlags()...),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			log, err := newLogger(c)
			if err != nil {
				return err
			}
			if err := applyMemoryLimit(c, log); err != nil {
				return err
			}
			if err := absDir(c); err != nil {
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
			if o := c.String("overlay"); o != "" {
				if _, err := spec.CheckOverlayCIDR(o); err != nil {
					return usagef("--overlay: %v", err)
				}
			}
			address, err := addressOf(c)
			if err != nil {
				return err
			}
			prof, err := pprofAddr(c)
			if err != nil {
				return err
			}
			if err := daemon.RefuseExisting(dir); err != nil {
				return err
			}
			if err := checkClusterFlag(c); err != nil {
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
			held := daemon.Held{Bus: busHeld, HTTP: httpHeld, DNS: dnsHeld}
			if err := absRoot(c); err != nil {
				return err
			}
			dnsCfg, err := resolverConfig(c, dnsAddr)
			if err != nil {
				return err
			}
			hostCfg, err := hostConfig(c)
			if err != nil {
				return err
			}
			// A version delivered has the host stand aside: then genesis
			// hands over to a launcher (handOver).
			hostCfg.Launched = true
			advertise, err := busURLs(busAddr, c.StringSlice("advertise"))
			if err != nil {
				return err
			}
			kc, _, _, err := mergeConfig(c, dir)
			if err != nil {
				return err
			}
			lifetime, err := certLifetime(c)
			if err != nil {
				return err
			}
			if err := checkHealthyWithin(c); err != nil {
				return err
			}
			busy, err := storeBusyTimeout(c)
			if err != nil {
				return err
			}
			m, err := daemon.NewMesh(daemon.MeshConfig{
				Dir: dir, Addrs: spec.Addrs{Bus: busAddr, HTTP: httpAddr, DNS: dnsAddr}, Advertise: advertise,
				Host: hostCfg, Resolver: dnsCfg, StoreBusyTimeout: busy, CertLifetime: lifetime, Held: held, Pprof: prof,
			}, log)
			if err != nil {
				return err
			}
			if err := daemon.Create(c.Context, daemon.Genesis{Dir: dir, Mesh: meshName, Node: node, Address: address, Bus: busAddr, Overlay: c.String("overlay")}); err != nil {
				return err
			}
			release, err := statedir.Lock(dir)
			if err != nil {
				return err
			}
			if err := statedir.WriteConfig(dir, kc); err != nil {
				release()
				return err
			}
			if _, err := keepCluster(c, dir, advertise); err != nil {
				release()
				return err
			}
			err = m.Run(c.Context)
			release()
			if errors.Is(err, host.ErrStandAside) && c.Context.Err() == nil {
				return handOver(log, dir, err)
			}
			return err
		},
	}
}

// handOver replaces genesis's process with mesh controller --dir D once its
// host stood aside for the version a roll delivered: the mesh has stopped,
// its lock is let go, and every address is the one kept in D (a port 0 was
// taken once, at genesis), so the launcher binds what genesis bound. The
// process keeps its ID, its output and what supervises it.
func handOver(log *slog.Logger, dir string, why error) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("hand over to mesh controller: find this executable: %w", err)
	}
	log.Info("handing over to mesh controller, a launcher, to run the version this node wants", "dir", dir, "why", why)
	err = syscall.Exec(self, []string{self, "controller", "--dir", dir}, os.Environ())
	return fmt.Errorf("hand over to mesh controller --dir %s: %w (run it yourself: the mesh is stopped)", dir, err)
}
