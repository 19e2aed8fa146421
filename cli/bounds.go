package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/mesh-fleet/mesh/mesh"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

// The bounds of the durations and ranges a machine starts with, given as
// flags or kept in D/config.yaml: a value outside them is refused at the
// start (exit 2), naming the flag, the bounds and the value. Each flag's
// --help says its bounds.
var (
	heartbeatBounds      = durationBounds{100 * time.Millisecond, 10 * time.Minute}
	reconcileBounds      = durationBounds{100 * time.Millisecond, 24 * time.Hour}
	certRenewCheckBounds = durationBounds{time.Second, 24 * time.Hour}
	// A leaf the controller signs lives at most a year: far inside the
	// intermediate that signs it (ca.IntermediateLifetime), which a leaf
	// cannot outlive and still verify, and no longer than a public CA's
	// leaf may. At least a minute, time to renew it in.
	certLifetimeBounds = durationBounds{mesh.MinCertLifetime, 365 * 24 * time.Hour}
	// A version has at least a second to be ready, and at most as long as
	// a roll gives a node: one not ready within a day is not coming up,
	// and a longer wait keeps it running with no fall-back.
	healthyWithinBounds = durationBounds{time.Second, spec.MaxHealthyWithin}
	// A store write waits for another writer's lock from 10ms (below that
	// any concurrent write fails) to a minute (longer, and the heartbeats
	// and verbs queued behind it outwait their callers).
	storeBusyBounds = durationBounds{10 * time.Millisecond, time.Minute}
)

// durationBounds are the shortest and the longest a duration flag takes.
type durationBounds struct{ min, max time.Duration }

func (b durationBounds) String() string { return fmt.Sprintf("%s to %s", b.min, b.max) }

// check refuses flag's value d outside b.
func (b durationBounds) check(flag string, d time.Duration) error {
	if d < b.min || d > b.max {
		return usagef("--%s %s is not between %s and %s", flag, d, b.min, b.max)
	}
	return nil
}

// certLifetime is --cert-lifetime, checked.
func certLifetime(c *cli.Context) (time.Duration, error) {
	d := c.Duration("cert-lifetime")
	if d < certLifetimeBounds.min {
		return 0, usagef("--cert-lifetime %s is shorter than %s: a certificate must outlive the time it takes to renew it", d, certLifetimeBounds.min)
	}
	if err := certLifetimeBounds.check("cert-lifetime", d); err != nil {
		return 0, usagef("%v: a leaf lives at most a year, well inside the intermediate that signs it", err)
	}
	return d, nil
}

// checkHealthyWithin refuses a launcher's --healthy-within outside
// healthyWithinBounds.
func checkHealthyWithin(c *cli.Context) error {
	d := c.Duration("healthy-within")
	if d < healthyWithinBounds.min {
		return usagef("--healthy-within %s is shorter than a second: give how long a version has to be ready (1m0s)", d)
	}
	return healthyWithinBounds.check("healthy-within", d)
}

// storeBusyTimeout is --store-busy-timeout, checked when given; zero,
// when not, is the store's default.
func storeBusyTimeout(c *cli.Context) (time.Duration, error) {
	if !c.IsSet("store-busy-timeout") {
		return 0, nil
	}
	d := c.Duration("store-busy-timeout")
	return d, storeBusyBounds.check("store-busy-timeout", d)
}

// Subnet bounds: a node's container network is IPv4, in a private range
// (RFC 1918), from /8 (the whole of 10.0.0.0/8) to /29 (a gateway and five
// containers). A public range would hide the addresses it shadows from
// the machine; 0.0.0.0/0 would shadow every one.
const (
	subnetMinBits = 8
	subnetMaxBits = 29
)

// privateRanges are the ranges a subnet lies within.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
}

// subnetBoundsUsage is what --subnet's help says of its bounds.
const subnetBoundsUsage = "a private IPv4 range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16), /8 to /29"

// checkSubnet is --subnet's value s, parsed and checked.
func checkSubnet(s string) (netip.Prefix, error) {
	subnet, err := netip.ParsePrefix(s)
	if err != nil || !subnet.Addr().Is4() || subnet.Masked() != subnet {
		return subnet, usagef("--subnet %q is not an IPv4 network in CIDR form (10.213.0.0/24)", s)
	}
	if subnet.Bits() < subnetMinBits || subnet.Bits() > subnetMaxBits {
		return subnet, usagef("--subnet %s: its prefix /%d is not between /%d and /%d", s, subnet.Bits(), subnetMinBits, subnetMaxBits)
	}
	for _, r := range privateRanges {
		if subnet.Bits() >= r.Bits() && r.Contains(subnet.Addr()) {
			return subnet, nil
		}
	}
	return subnet, usagef("--subnet %s is not within a private range: 10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16", s)
}

// absRoot refuses a --root that is not an absolute path to a directory:
// an empty or relative one would resolve against the working directory
// (under a service manager, the machine's own root), and every declared
// path would fail under one that is no directory.
func absRoot(c *cli.Context) error {
	root := c.String("root")
	if root == "" {
		return usagef("--root is empty: give the directory declared paths resolve under, an absolute path (/ for the machine itself)")
	}
	if !filepath.IsAbs(root) {
		return usagef("--root %q is not an absolute path: give the directory declared paths resolve under from / (/ for the machine itself)", root)
	}
	clean := filepath.Clean(root)
	if info, err := os.Stat(clean); errors.Is(err, fs.ErrNotExist) {
		return usagef("--root %s: no such directory: create it or pass another --root", clean)
	} else if err != nil {
		return fmt.Errorf("--root %s: %w", clean, err)
	} else if !info.IsDir() {
		return usagef("--root %s: not a directory: pass a directory as --root", clean)
	}
	if clean != root {
		return c.Set("root", clean)
	}
	return nil
}

// absDir refuses a --dir that is not an absolute path, for a command that
// runs a machine: a relative one would name another directory from
// another working directory, and its launcher, its child and its service
// unit would each read their own. A directory that does not exist is
// each command's to refuse or make.
func absDir(c *cli.Context) error {
	dir := c.String("dir")
	if dir == "" {
		return usagef("--dir is empty: give the machine's state directory, an absolute path (/var/lib/mesh)")
	}
	if !filepath.IsAbs(dir) {
		return usagef("--dir %q is not an absolute path: give the machine's state directory from / (/var/lib/mesh)", dir)
	}
	return nil
}
