package cli

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/urfave/cli/v2"
)

// The state directory's layout (DESIGN.md, "The state directory").
const (
	addrsFile     = "addrs.json"
	operatorCreds = "operator.creds"
	controllerDir = "controller"
	hostDir       = "host"
)

// hostFlags are the flags of every command that runs a host.
func hostFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "dns", Value: "127.0.0.1:53", Usage: "where the machine's resolver listens, host:port (port 0: any free port)"},
		&cli.StringSliceFlag{Name: "dns-upstream", Usage: "an upstream resolver for names outside the mesh, host:port (repeat; default: those of /etc/resolv.conf)"},
		&cli.StringSliceFlag{Name: "dns-allow", Usage: "a network, besides loopback, whose queries the resolver answers, CIDR (repeat)"},
		&cli.StringFlag{Name: "root", Value: "/", Usage: "where declared paths resolve (a directory, for trying mesh out without touching the machine)"},
		&cli.DurationFlag{Name: "reconcile", Value: 5 * time.Minute, Usage: "how often the host applies what it keeps again, correcting drift"},
		&cli.DurationFlag{Name: "heartbeat", Value: 10 * time.Second, Usage: "how often the host reports that it is alive"},
		&cli.StringFlag{Name: "docker", Usage: "the container engine's API, unix:///path or tcp://host:port (default: DOCKER_HOST, else /var/run/docker.sock); none: this host runs no containers"},
		&cli.StringFlag{Name: "subnet", Value: host.DefaultSubnet.String(), Usage: "the node's container network mesh-NODE, IPv4 CIDR; its first address is the gateway, where the resolver also listens (port 53)"},
	}
}

// hostConfig is the host as the flags say.
func hostConfig(c *cli.Context) (host.Config, error) {
	cfg := host.Config{Root: c.String("root"), ReconcileEvery: c.Duration("reconcile"), HeartbeatEvery: c.Duration("heartbeat")}
	subnet, err := netip.ParsePrefix(c.String("subnet"))
	if err != nil || !subnet.Addr().Is4() || subnet.Bits() > 29 || subnet.Masked() != subnet {
		return cfg, usagef("--subnet %q is not an IPv4 network of /29 or larger in CIDR form (10.213.0.0/24)", c.String("subnet"))
	}
	cfg.Subnet = subnet
	if endpoint := c.String("docker"); endpoint != "none" {
		if cfg.Docker, err = host.NewDocker(endpoint); err != nil {
			return cfg, usagef("--docker: %v", err)
		}
	}
	return cfg, nil
}

// resolverConfig is the machine's resolver as the flags say; listen is the
// address to bind (the flag's, or the one bound before).
func resolverConfig(c *cli.Context, listen string) (resolver.Config, error) {
	cfg := resolver.Config{Listen: []string{listen}, Upstreams: c.StringSlice("dns-upstream")}
	for _, a := range c.StringSlice("dns-allow") {
		p, err := netip.ParsePrefix(a)
		if err != nil {
			return cfg, usagef("--dns-allow %q is not a network in CIDR form (10.0.0.0/8)", a)
		}
		cfg.Allow = append(cfg.Allow, p)
	}
	return cfg, nil
}

func logFlag() cli.Flag {
	return &cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"}
}

func newLogger(c *cli.Context) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", c.String("log-level"))
	}
	return slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level})), nil
}

func genesisCommand() *cli.Command {
	return &cli.Command{
		Name:  "genesis",
		Usage: "create a mesh on this machine and run its controller and host",
		Description: `Creates the state directory (0700): the store, the signing key, the CA, the
operator's credential, and this machine's host as the mesh's first node.
Then runs the controller and the host in the foreground until SIGINT or
SIGTERM. Run it again later with mesh controller --dir D.

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
		}, hostFlags()...),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			log, err := newLogger(c)
			if err != nil {
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
			if err := refuseExisting(dir); err != nil {
				return err
			}
			// Bind each address once before anything is written, so an address
			// that cannot be bound changes nothing on disk; a port 0 becomes the
			// port kept from then on.
			// Each claim is held until the last is made, so that two port 0s
			// never come back as the same port.
			busAddr, busHeld, err := holdPort("--bus", c.String("bus"))
			if err != nil {
				return err
			}
			httpAddr, httpHeld, err := holdPort("--http", c.String("http"))
			if err != nil {
				busHeld.Close()
				return err
			}
			dnsAddr, err := claimDNSFlag(c)
			busHeld.Close()
			httpHeld.Close()
			if err != nil {
				return err
			}
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
			advertise, err := busURLs(busAddr, c.StringSlice("advertise"))
			if err != nil {
				return err
			}
			kc, _, _, err := mergeConfig(c, dir)
			if err != nil {
				return err
			}
			if err := create(c.Context, dir, meshName, node, address, busAddr); err != nil {
				return err
			}
			release, err := lockDir(dir)
			if err != nil {
				return err
			}
			defer release()
			if err := writeConfig(dir, kc); err != nil {
				return err
			}
			return serve(c.Context, log, dir, spec.Addrs{Bus: busAddr, HTTP: httpAddr, DNS: dnsAddr}, advertise, hostCfg, dnsCfg)
		},
	}
}

func controllerCommand() *cli.Command {
	return &cli.Command{
		Name:  "controller",
		Usage: "run an existing mesh again: its controller and its host",
		Description: `Runs the mesh kept in --dir on the addresses it bound before (from
D/addrs.json), so hosts find the bus again with no action, and with the
host flags it was started with (from D/config.yaml). A flag given here
overrides the file and is kept from then on; --bus and --http rebind and
are kept in D/addrs.json.

Example:
   mesh controller --dir /var/lib/mesh
   mesh controller --dir /var/lib/mesh --bus 0.0.0.0:4222 --advertise 192.0.2.10`,
		Flags: append([]cli.Flag{
			dirFlag(),
			&cli.StringFlag{Name: "bus", Usage: "rebind the bus, host:port (default: where it bound before)"},
			&cli.StringFlag{Name: "http", Usage: "rebind /healthz, /metrics and /roots.pem, host:port (default: where it bound before)"},
			advertiseFlag(),
			logFlag(),
		}, hostFlags()...),
		Action: func(c *cli.Context) error {
			if err := wantArgs(c, 0, "no arguments"); err != nil {
				return err
			}
			dir := c.String("dir")
			ok, err := mesh.IsMesh(filepath.Join(dir, controllerDir))
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%s holds no mesh: create one with mesh genesis --dir %s --mesh NAME --node NAME", dir, dir)
			}
			release, err := lockDir(dir)
			if err != nil {
				return err
			}
			defer release()
			addrs, err := readAddrs(dir)
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
			kc, changes, fromFile, err := mergeConfig(c, dir)
			if err != nil {
				return err
			}
			log, err := newLogger(c)
			if err != nil {
				return fromFileHint(err, fromFile, dir)
			}
			if err := rebind(c, log, &addrs); err != nil {
				return err
			}
			if addrs.DNS, err = claimDNSFlag(c); err != nil {
				return err
			}
			if err := absRoot(c); err != nil {
				return err
			}
			kc["dns"], kc["root"] = []string{addrs.DNS}, []string{c.String("root")}
			dnsCfg, err := resolverConfig(c, addrs.DNS)
			if err != nil {
				return fromFileHint(err, fromFile, dir)
			}
			hostCfg, err := hostConfig(c)
			if err != nil {
				return fromFileHint(err, fromFile, dir)
			}
			advertise, err := busURLs(addrs.Bus, c.StringSlice("advertise"))
			if err != nil {
				return fromFileHint(err, fromFile, dir)
			}
			if err := checkSubnetChange(c.Context, dir, hostCfg, changes); err != nil {
				return err
			}
			if err := followBus(dir, addrs.Bus); err != nil {
				return err
			}
			if err := writeConfig(dir, kc); err != nil {
				return err
			}
			logChanges(log, dir, changes)
			return serve(c.Context, log, dir, addrs, advertise, hostCfg, dnsCfg)
		},
	}
}

func advertiseFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "advertise", Usage: "an address other machines reach the bus at, IP or name, with :port when it differs from the bus's; join tokens carry these (repeat; default: the bus's address, the machine's primary address for a wildcard)"}
}

// rebind takes --bus and --http at a controller's start: each is bound once
// to check it (a port 0 becomes the port kept), and addrs records it.
func rebind(c *cli.Context, log *slog.Logger, addrs *spec.Addrs) error {
	for _, f := range []struct {
		flag string
		addr *string
	}{{"bus", &addrs.Bus}, {"http", &addrs.HTTP}} {
		if !c.IsSet(f.flag) {
			continue
		}
		bound, err := claimPort("--"+f.flag, c.String(f.flag))
		if err != nil {
			return err
		}
		if bound != *f.addr {
			log.Info("rebinding", "flag", "--"+f.flag, "was", *f.addr, "now", bound)
			*f.addr = bound
		}
	}
	return nil
}

// busURLs are what join tokens carry: each --advertise address (with the
// bus's port when it names none), or the bus's own address made reachable.
func busURLs(bus string, advertise []string) ([]string, error) {
	if len(advertise) == 0 {
		return []string{"nats://" + reachable(bus)}, nil
	}
	_, busPort, _ := net.SplitHostPort(bus)
	var urls []string
	for _, a := range advertise {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			host, port = strings.Trim(a, "[]"), busPort
		}
		if host == "" || strings.ContainsAny(host, "/ ") {
			return nil, usagef("--advertise %q: want an IP address or a name, with :port when it is not the bus's (192.0.2.10, mesh.example.org:4222)", a)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return nil, usagef("--advertise %q: a wildcard cannot be reached; give the address other machines dial", a)
		}
		urls = append(urls, "nats://"+net.JoinHostPort(host, port))
	}
	return urls, nil
}

// followBus points the controller machine's own host at the bus where it
// now listens (a --bus that moved the port would leave it dialling the old
// one).
func followBus(dir, bus string) error {
	hostPath := filepath.Join(dir, hostDir)
	st, _, err := host.ReadState(hostPath)
	if err != nil {
		return err
	}
	url := "nats://" + dialable(bus)
	if len(st.Bus) == 1 && st.Bus[0] == url {
		return nil
	}
	st.Bus = []string{url}
	return host.WriteState(hostPath, st)
}

// checkSubnetChange refuses a --subnet that moves the node's network while
// containers are attached to it, before anything is written.
func checkSubnetChange(ctx context.Context, dir string, cfg host.Config, changes []configChange) error {
	if cfg.Docker == nil || !slices.ContainsFunc(changes, func(ch configChange) bool { return ch.flag == "subnet" }) {
		return nil
	}
	st, _, err := host.ReadState(filepath.Join(dir, hostDir))
	if err != nil {
		return err
	}
	return cfg.Docker.CheckSubnet(ctx, st.Node, cfg.Subnet)
}

// refuseExisting refuses a directory that already holds a mesh, or anything.
func refuseExisting(dir string) error {
	ok, err := mesh.IsMesh(filepath.Join(dir, controllerDir))
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("%s already holds a mesh: run it again with mesh controller --dir %s", dir, dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty and holds no mesh: give genesis an empty or new directory", dir)
	}
	return nil
}

// claimPort checks that addr can be bound, and turns a port 0 into a free port.
func claimPort(flag, addr string) (string, error) {
	bound, held, err := holdPort(flag, addr)
	if err != nil {
		return "", err
	}
	held.Close()
	return bound, nil
}

// holdPort is claimPort that keeps the port bound until the caller closes
// it.
func holdPort(flag, addr string) (string, net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", nil, usagef("%s %q: %v (want host:port)", flag, addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("%s %s cannot be bound: %w (choose another with %s)", flag, addr, err, flag)
	}
	return l.Addr().String(), l, nil
}

// claimDNSPort is claimPort for the resolver, which binds UDP and TCP on one
// port: a port 0 becomes a port free for both.
func claimDNSPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", usagef("--dns %q: %v (want host:port)", addr, err)
	}
	for try := 0; ; try++ {
		u, err := net.ListenPacket("udp", net.JoinHostPort(host, port))
		if err != nil {
			return "", fmt.Errorf("--dns %s cannot be bound: %w (choose another with --dns)", addr, err)
		}
		// The host as asked: a wildcard stays the wildcard (the socket of
		// 0.0.0.0 calls itself [::], which would then bind IPv6 only).
		bound := net.JoinHostPort(host, strconv.Itoa(u.LocalAddr().(*net.UDPAddr).Port))
		t, err := net.Listen("tcp", bound)
		u.Close()
		if err == nil {
			t.Close()
			return bound, nil
		}
		if port != "0" || try == 20 {
			return "", fmt.Errorf("--dns %s cannot be bound: %w (choose another with --dns)", addr, err)
		}
	}
}

// create writes a new mesh into dir; on failure it removes what it wrote.
func create(ctx context.Context, dir, meshName, node, address, busAddr string) (err error) {
	made := false
	if _, statErr := os.Stat(dir); errors.Is(statErr, os.ErrNotExist) {
		made = true
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	defer func() {
		if err == nil {
			return
		}
		if made {
			os.RemoveAll(dir)
			return
		}
		for _, name := range []string{controllerDir, hostDir, operatorCreds, addrsFile} {
			os.RemoveAll(filepath.Join(dir, name))
		}
	}()
	g, err := mesh.Create(ctx, mesh.GenesisConfig{
		Dir: filepath.Join(dir, controllerDir), Mesh: meshName, Node: node, Address: address, Now: time.Now(),
	})
	if err != nil {
		return err
	}
	root := string(ca.RootPEM(g.Root))
	if err := writeOperatorCreds(dir, operatorFile{Mesh: meshName, Seed: string(g.OperatorSeed), CARoot: root}); err != nil {
		return err
	}
	return host.Init(filepath.Join(dir, hostDir), host.State{
		Mesh:    meshName,
		Node:    node,
		Address: address,
		Bus:     []string{"nats://" + dialable(busAddr)},
		CAPin:   ca.Pin(g.Root),
		CARoot:  root,
		SignKey: base64.StdEncoding.EncodeToString(g.SignPub),
	}, g.NodeSeed)
}

// serve runs a mesh's parts in start order (store, CA, bus, controller,
// host), each ready before the next starts, until SIGINT or SIGTERM; then
// stops them in reverse, the store last.
func serve(ctx context.Context, log *slog.Logger, dir string, addrs spec.Addrs, advertise []string, hostCfg host.Config, dnsCfg resolver.Config) error {
	ctlDir := filepath.Join(dir, controllerDir)

	db, err := store.Open(ctx, filepath.Join(ctlDir, mesh.DBFile))
	if err != nil {
		return err
	}
	defer db.Close()
	auth, err := ca.Load(filepath.Join(ctlDir, mesh.CADir))
	if err != nil {
		return err
	}
	busHost, _, _ := net.SplitHostPort(addrs.Bus)
	cert, err := auth.IssueServer(busNames(), busIPs(busHost), 365*24*time.Hour)
	if err != nil {
		return err
	}
	ctlKeys, err := mesh.NewKeys()
	if err != nil {
		return err
	}
	users, err := mesh.Users(ctx, db, ctlKeys, time.Now())
	if err != nil {
		return err
	}
	signKey, err := mesh.LoadSignKey(ctlDir)
	if err != nil {
		return err
	}
	bus, err := broker.New(broker.Config{
		Listen:   addrs.Bus,
		StoreDir: filepath.Join(ctlDir, mesh.JSDir),
		TLS:      &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Users:    users,
	}, log.With("component", "bus"))
	if err != nil {
		return err
	}
	dns, err := resolver.New(dnsCfg, log.With("component", "resolver"))
	if err != nil {
		return err
	}
	// One count of recovered panics for the process: /metrics shows the
	// host's with the controller's.
	panics := new(atomic.Uint64)
	hostCfg.Dir = filepath.Join(dir, hostDir)
	hostCfg.Names = dns
	hostCfg.Panics = panics
	agent, err := host.New(hostCfg, log.With("component", "host"))
	if err != nil {
		return err
	}
	ctl, err := mesh.New(mesh.Config{
		HTTPListen: addrs.HTTP,
		Keys:       ctlKeys,
		BusURLs:    advertise,
		SignKey:    signKey,
		Panics:     panics,
		Node:       agent.Node(),
		Parts:      []mesh.Part{{Name: "bus", Ready: bus.Ready()}, {Name: "resolver", Ready: dns.Ready()}, {Name: "host", Ready: agent.Ready()}},
	}, log.With("component", "controller"), mesh.Deps{DB: db, CA: auth, Bus: bus})
	if err != nil {
		return err
	}

	parts := []part{
		{"bus", bus.Run, bus.Ready()},
		{"resolver", dns.Run, dns.Ready()},
		{"controller", ctl.Run, ctl.Ready()},
		{"host", ownHost(log, agent), agent.Ready()},
	}
	runErr := runParts(ctx, log, parts, func() error {
		addrs.Bus, addrs.HTTP, addrs.DNS = bus.Addr(), ctl.HTTPAddr(), dns.Addrs()[0]
		if err := writeAddrs(dir, addrs); err != nil {
			return err
		}
		log.Info("mesh ready", "bus", addrs.Bus, "http", addrs.HTTP, "dns", addrs.DNS, "node", agent.Node())
		return nil
	})
	if err := db.Close(); err != nil && runErr == nil {
		runErr = fmt.Errorf("close store: %w", err)
	}
	return runErr
}

// runParts runs parts in order until ctx ends (main cancels it on SIGINT
// or SIGTERM).
func runParts(ctx context.Context, log *slog.Logger, parts []part, started func() error) error {
	return runInOrder(ctx, log, parts, started)
}

type part struct {
	name  string
	run   func(context.Context) error
	ready <-chan struct{}
}

// runInOrder starts parts one by one, each once the one before is ready,
// calls started when all are, and runs until ctx ends or a part fails; then
// it stops them in reverse order, waiting for each.
func runInOrder(ctx context.Context, log *slog.Logger, parts []part, started func() error) error {
	type running struct {
		cancel context.CancelFunc
		done   chan error
	}
	var live []running
	failed := make(chan error, len(parts))
	var firstErr error
	stopAll := func() {
		for i := len(live) - 1; i >= 0; i-- {
			live[i].cancel()
			if err := <-live[i].done; err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	for _, p := range parts {
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() {
			err := p.run(pctx)
			if err != nil {
				err = fmt.Errorf("%s: %w", p.name, err)
				failed <- err
			}
			done <- err
		}()
		live = append(live, running{cancel, done})
		select {
		case <-p.ready:
		case err := <-failed:
			firstErr = err
			stopAll()
			return firstErr
		case <-ctx.Done():
			stopAll()
			return firstErr
		}
	}
	if err := started(); err != nil {
		firstErr = err
		stopAll()
		return firstErr
	}
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case err := <-failed:
		firstErr = err
	}
	stopAll()
	return firstErr
}

func busNames() []string {
	names := []string{spec.BusTLSName, "localhost"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	return names
}

// busIPs are the addresses the bus's certificate names: the listen address,
// or every address of the machine when it listens on all.
func busIPs(listenHost string) []net.IP {
	ip := net.ParseIP(listenHost)
	if ip != nil && !ip.IsUnspecified() {
		return []net.IP{ip}
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			ips = append(ips, n.IP)
		}
	}
	return ips
}

// dialable turns a listen address into one a client on this machine can dial.
func dialable(addr string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		h = "127.0.0.1"
	}
	return net.JoinHostPort(h, p)
}

// reachable turns a listen address into one other machines can dial: an
// unspecified host becomes the machine's primary address.
func reachable(addr string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		h = primaryAddress()
	}
	return net.JoinHostPort(h, p)
}

// addressOf is --address, checked, or the machine's primary address.
func addressOf(c *cli.Context) (string, error) {
	address := c.String("address")
	if address == "" {
		return primaryAddress(), nil
	}
	if net.ParseIP(address) == nil {
		return "", usagef("--address %q is not an IP address", address)
	}
	return address, nil
}

// primaryAddress is the machine's first global unicast IPv4 address on an
// interface that is up, or loopback when it has none.
func primaryAddress() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

func readAddrs(dir string) (spec.Addrs, error) {
	var a spec.Addrs
	body, err := os.ReadFile(filepath.Join(dir, addrsFile))
	if err != nil {
		return a, fmt.Errorf("read the mesh's addresses: %w (is %s a mesh's state directory?)", err, dir)
	}
	if err := spec.Decode(body, &a); err != nil {
		return a, fmt.Errorf("read %s: %w", filepath.Join(dir, addrsFile), err)
	}
	if a.Bus == "" {
		return a, fmt.Errorf("%s names no bus address", filepath.Join(dir, addrsFile))
	}
	return a, nil
}

func writeAddrs(dir string, a spec.Addrs) error {
	body, _ := json.MarshalIndent(a, "", "  ")
	if err := host.WriteFileAtomic(filepath.Join(dir, addrsFile), append(body, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", addrsFile, err)
	}
	return nil
}

// operatorFile is D/operator.creds: the operator's bus credential and the
// root that the bus's certificate must chain to.
type operatorFile struct {
	Mesh   string `json:"mesh"`
	Seed   string `json:"seed"`
	CARoot string `json:"ca_root"`
}

func writeOperatorCreds(dir string, f operatorFile) error {
	body, _ := json.MarshalIndent(f, "", "  ")
	if err := host.WriteFileAtomic(filepath.Join(dir, operatorCreds), append(body, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", operatorCreds, err)
	}
	return nil
}

func readOperatorCreds(dir string) (operatorFile, error) {
	var f operatorFile
	path := filepath.Join(dir, operatorCreds)
	body, err := os.ReadFile(path)
	if err != nil {
		return f, fmt.Errorf("read the operator credential: %w (is %s a mesh's state directory? --dir or MESH_DIR names it)", err, dir)
	}
	if err := spec.Decode(body, &f); err != nil {
		return f, fmt.Errorf("read %s: %w", path, err)
	}
	return f, nil
}
