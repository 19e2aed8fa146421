package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

// hostFlags are the flags of every command that runs a host.
func hostFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "dns", Value: "127.0.0.1:53", Usage: "where the machine's resolver listens, host:port (port 0: any free port)"},
		&cli.StringSliceFlag{Name: "dns-upstream", Usage: "an upstream resolver for names outside the mesh, host:port (repeat; default: those of /etc/resolv.conf)"},
		&cli.StringSliceFlag{Name: "dns-allow", Usage: "a network, besides loopback, whose queries the resolver answers, CIDR (repeat)"},
		&cli.StringFlag{Name: "root", Value: "/", Usage: "where declared paths resolve: an absolute path to a directory (another than /, for trying mesh out without touching the machine)"},
		&cli.DurationFlag{Name: "reconcile", Value: 5 * time.Minute, Usage: "how often the host applies what it keeps again, correcting drift (" + reconcileBounds.String() + ")"},
		&cli.DurationFlag{Name: "heartbeat", Value: 10 * time.Second, Usage: "how often the host reports that it is alive (" + heartbeatBounds.String() + ")"},
		&cli.StringFlag{Name: "docker", Usage: "the container engine's API, unix:///path or tcp://host:port (default: DOCKER_HOST, else /var/run/docker.sock); none: this host runs no containers"},
		&cli.DurationFlag{Name: "cert-renew-check", Value: host.DefaultCertRenewCheck, Usage: "how often the host looks for certificates to renew (each is renewed at two thirds of its lifetime; keep this well under the controller's --cert-lifetime; " + certRenewCheckBounds.String() + ")"},
		&cli.StringFlag{Name: "subnet", Value: host.DefaultSubnet.String(), Usage: "the node's container network mesh-NODE, IPv4 CIDR; its first address is the gateway, where the resolver also listens (port 53); " + subnetBoundsUsage},
		&cli.StringFlag{Name: "endpoint", Usage: "where other nodes reach this host's overlay (WireGuard), IP:PORT, when it is not one of the machine's own addresses (a public address forwarded to it)"},
		&cli.BoolFlag{Name: "relay", Usage: "forward overlay traffic between nodes that cannot reach each other (give it on a node others can reach)"},
		&cli.IntFlag{Name: "wg-port", Value: spec.OverlayPort, Usage: "the UDP port the overlay's WireGuard listens on"},
	}
}

// hostConfig is the host as the flags say.
func hostConfig(c *cli.Context) (host.Config, error) {
	cfg := host.Config{Root: c.String("root"), ReconcileEvery: c.Duration("reconcile"), HeartbeatEvery: c.Duration("heartbeat"), CertRenewCheck: c.Duration("cert-renew-check")}
	if cfg.CertRenewCheck < time.Second {
		return cfg, usagef("--cert-renew-check %s is shorter than a second: give how often to look for certificates to renew (10m0s)", cfg.CertRenewCheck)
	}
	for _, d := range []struct {
		flag   string
		value  time.Duration
		bounds durationBounds
	}{{"cert-renew-check", cfg.CertRenewCheck, certRenewCheckBounds}, {"heartbeat", cfg.HeartbeatEvery, heartbeatBounds}, {"reconcile", cfg.ReconcileEvery, reconcileBounds}} {
		if err := d.bounds.check(d.flag, d.value); err != nil {
			return cfg, err
		}
	}
	subnet, err := checkSubnet(c.String("subnet"))
	if err != nil {
		return cfg, err
	}
	cfg.Subnet = subnet
	cfg.Overlay = host.OverlayConfig{Endpoint: c.String("endpoint"), Relay: c.Bool("relay"), Port: c.Int("wg-port")}
	if cfg.Overlay.Port < 1 || cfg.Overlay.Port > 65535 {
		return cfg, usagef("--wg-port %d is not a UDP port (1 to 65535)", cfg.Overlay.Port)
	}
	if cfg.Overlay.Endpoint != "" {
		if err := spec.CheckEndpoint(cfg.Overlay.Endpoint); err != nil {
			return cfg, usagef("--endpoint: %v", err)
		}
	}
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

func advertiseFlag() cli.Flag {
	return &cli.StringSliceFlag{Name: "advertise", Usage: "an address other machines reach the bus at, IP or name, with :port when it differs from the bus's; join tokens carry these (repeat; default: the bus's address, the machine's primary address for a wildcard)"}
}

// certLifetimeFlag is how long the leaves the controller signs for nodes
// are valid: a controller's flag, kept in D/config.yaml.
func certLifetimeFlag() cli.Flag {
	return &cli.DurationFlag{Name: "cert-lifetime", Value: mesh.DefaultCertLifetime,
		Usage: "how long a certificate the controller signs for a node is valid (" + certLifetimeBounds.String() + ")"}
}

// storeBusyFlag is how long the controller's store writes wait for a lock:
// hidden, for tests that hold the lock on purpose.
func storeBusyFlag() cli.Flag {
	return &cli.DurationFlag{Name: "store-busy-timeout", Hidden: true, Usage: "how long a store write waits for another writer's lock before it fails (default 5s; " + storeBusyBounds.String() + ")"}
}

// busURLs are what join tokens carry: each --advertise address (with the
// bus's port when it names none), or the bus's own address made reachable.
func busURLs(bus string, advertise []string) ([]string, error) {
	if len(advertise) == 0 {
		return []string{"nats://" + daemon.Reachable(bus)}, nil
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

// addressOf is --address, checked, or the machine's primary address.
func addressOf(c *cli.Context) (string, error) {
	address := c.String("address")
	if address == "" {
		return daemon.PrimaryAddress(), nil
	}
	if net.ParseIP(address) == nil {
		return "", usagef("--address %q is not an IP address", address)
	}
	return address, nil
}

// holdPort checks that the address flag gives can be bound, turns a port
// 0 into a free port, and keeps it bound until the caller closes it (the
// daemon does, just before the part that binds it starts).
func holdPort(flag, addr string) (string, net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", nil, usagef("%s %q: %v (want host:port)", flag, addr, err)
	}
	bound, l, err := daemon.HoldPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("%s %s cannot be bound: %w (choose another with %s)", flag, addr, err, flag)
	}
	return bound, l, nil
}

// holdDNSFlag checks that --dns can be bound, for UDP and TCP both, before
// anything is written, and turns a port 0 into a free port, so the file
// keeps the port the machine's containers and clients use. The port stays
// bound until the caller closes it (the daemon does, just before the
// resolver starts).
func holdDNSFlag(c *cli.Context) (string, io.Closer, error) {
	addr := c.String("dns")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", nil, usagef("--dns %q: %v (want host:port)", addr, err)
	}
	bound, held, err := daemon.HoldDNSPort(addr)
	if err != nil {
		return "", nil, fmt.Errorf("--dns %s cannot be bound: %w (choose another with --dns)", addr, err)
	}
	if err := c.Set("dns", bound); err != nil {
		held.Close()
		return "", nil, err
	}
	return bound, held, nil
}

// pprofFlag serves Go's profiles of the controller's process (heap,
// goroutines, CPU: net/http/pprof) on a loopback address: off unless
// given, never kept in D/config.yaml.
func pprofFlag() cli.Flag {
	return &cli.StringFlag{Name: "pprof", Usage: "serve Go's profiles of this process (/debug/pprof/: heap, goroutine, profile) on `ADDR`, a loopback host:port such as 127.0.0.1:6060; off by default"}
}

// pprofAddr is --pprof, checked: a host:port whose host is a loopback
// address (the profiles show the process's memory, keys included), or ""
// when not given.
func pprofAddr(c *cli.Context) (string, error) {
	addr := c.String("pprof")
	if addr == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", usagef("--pprof %q: %v (want a loopback host:port, e.g. 127.0.0.1:6060)", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", usagef("--pprof %q: port %q is not a number from 0 to 65535", addr, port)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", usagef("--pprof %q: the profiles are served on a loopback address only (127.0.0.1 or ::1): they show the process's memory", addr)
	}
	return addr, nil
}

// defaultMemoryLimitMiB is the controller's soft memory limit unless told
// otherwise (see memoryLimitFlag): below the 1 GiB a controller of 10,000
// hosts is to stay within, and high enough that the collector does not take
// most of the CPU at that size (docs/benchmarks.md has the figures).
const defaultMemoryLimitMiB = 900

// memoryLimitFlag is the Go runtime's soft memory limit for a process that
// runs the controller (debug.SetMemoryLimit). Left to itself the garbage
// collector lets the heap grow to twice what is live before it collects;
// with a fleet of 10,000 hosts connected that slack is most of the
// controller's RSS. The limit has the collector work harder as the
// process nears it instead, so the RSS stays near the limit as long as
// what is live fits below it; past that it is exceeded, not enforced.
func memoryLimitFlag() cli.Flag {
	return &cli.IntFlag{Name: "memory-limit", Value: defaultMemoryLimitMiB,
		Usage: "the controller's soft memory limit, in MiB: the Go garbage collector works harder as the process nears it (0: none, the heap may grow to twice what is live; GOMEMLIMIT, when set, wins)"}
}

// applyMemoryLimit sets the process's soft memory limit from
// --memory-limit, unless GOMEMLIMIT set it already.
func applyMemoryLimit(c *cli.Context, log *slog.Logger) error {
	mib := c.Int("memory-limit")
	if mib < 0 {
		return usagef("--memory-limit %d: give a size in MiB, or 0 for none", mib)
	}
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Debug("soft memory limit from GOMEMLIMIT", "GOMEMLIMIT", env)
		return nil
	}
	if mib > 0 {
		debug.SetMemoryLimit(int64(mib) << 20)
	}
	return nil
}
