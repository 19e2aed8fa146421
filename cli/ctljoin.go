package cli

import (
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

// controllerJoinFlags are mesh controller's flags of a join: the token,
// and the address its node joins with.
func controllerJoinFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "join", Usage: "a token from mesh token create --controller NODE: join the mesh as one of its controllers, with --bus, --http and --cluster"},
		&cli.StringFlag{Name: "join-file", Usage: "a file holding a token from mesh token create --controller NODE"},
		&cli.StringFlag{Name: "address", Usage: "with --join: where other nodes reach this one (default: the machine's primary address)"},
	}
}

// defaultJoinHTTP is where a joining controller's /healthz listens
// without --http: genesis's default.
const defaultJoinHTTP = "127.0.0.1:8480"

// controllerJoinThenRun joins the mesh the token names as one of its
// controllers, in this process, and runs this process again with its
// arguments but the join's: mesh controller, which runs the controller
// the join wrote. Every flag is checked first, so a bad one changes
// nothing.
func controllerJoinThenRun(c *cli.Context) error {
	if err := absDir(c); err != nil {
		return err
	}
	tok, err := joinToken(c)
	if err != nil {
		return err
	}
	if !tok.Controller {
		return usagef("token %s enrols a host: run mesh host --join with it, or create a controller's token (mesh token create --controller %s); nothing was done", tok.ID, tok.Node)
	}
	if !c.IsSet("bus") || !c.IsSet("cluster") {
		return usagef("a controller's join needs --bus HOST:PORT (where its bus listens) and --cluster HOST:PORT (where its routes listen); nothing was done")
	}
	if err := checkClusterFlag(c); err != nil {
		return err
	}
	if _, port, err := net.SplitHostPort(c.String("bus")); err == nil && port == "0" {
		return usagef("--bus %q: give a fixed port with --join (the other controllers and the hosts dial it); nothing was done", c.String("bus"))
	}
	dir := c.String("dir")
	if err := daemon.RefuseExisting(dir); err != nil {
		return usagef("%v; nothing was done", err)
	}
	address, err := addressOf(c)
	if err != nil {
		return err
	}
	if c.IsSet("advertise") && len(c.StringSlice("advertise")) == 0 {
		return usagef("--advertise is empty; nothing was done")
	}
	httpFlag := c.String("http")
	if httpFlag == "" {
		httpFlag = defaultJoinHTTP
	}
	addrs, err := checkJoinAddrs(c, httpFlag)
	if err != nil {
		return err
	}
	advertise, err := busURLs(addrs.Bus, c.StringSlice("advertise"))
	if err != nil {
		return err
	}
	log, err := newLogger(c)
	if err != nil {
		return err
	}
	err = daemon.JoinController(c.Context, daemon.ControllerJoin{
		Dir: dir, Token: tok, Address: address, Addrs: addrs, BusURL: advertise[0], Cluster: c.String("cluster"), Now: time.Now(),
		Waiting: joinWaiting(log),
	})
	if err != nil {
		return err
	}
	log.Info("joined as a controller", "mesh", tok.Mesh, "node", tok.Node, "cluster", c.String("cluster"))
	args := withoutJoin(os.Args)
	if err := syscall.Exec("/proc/self/exe", args, os.Environ()); err != nil {
		return fmt.Errorf("joined as controller %q, but run mesh again without the token: %w; run it with %s", tok.Node, err, strings.Join(args, " "))
	}
	return nil
}

// checkJoinAddrs binds --bus, --http and --dns once to check them (a
// port 0 becomes the port kept), and lets them go for the controller
// that runs after the join.
func checkJoinAddrs(c *cli.Context, httpFlag string) (spec.Addrs, error) {
	var addrs spec.Addrs
	bus, busHeld, err := holdPort("--bus", c.String("bus"))
	if err != nil {
		return addrs, err
	}
	defer busHeld.Close()
	httpAddr, httpHeld, err := holdPort("--http", httpFlag)
	if err != nil {
		return addrs, err
	}
	defer httpHeld.Close()
	dns, dnsHeld, err := holdDNSFlag(c)
	if err != nil {
		return addrs, err
	}
	defer dnsHeld.Close()
	return spec.Addrs{Bus: bus, HTTP: httpAddr, DNS: dns}, nil
}
