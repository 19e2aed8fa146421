package dockertest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/client"
)

// Subnet is a /24 of base (a /16) that is the test's alone until it ends,
// for the network it makes in the engine: no network of the engine holds
// it when it is handed out, and no other test holds it, in this process or
// in another run against the same engine (a package's tests and another
// worktree's run at once). Each /24 handed out is held by a lock on a file
// in the temporary directory, which the kernel lets go when the test ends
// or its run is killed; one that a killed run's network still holds is
// passed over.
//
// The test removes what it made on the subnet before it ends: the lock is
// let go by a cleanup registered here, so it runs after the test's own
// cleanups registered later.
func Subnet(t testing.TB, cli *client.Client, base netip.Prefix) netip.Prefix {
	t.Helper()
	p, release, err := claimSubnet(base, os.TempDir(), func() ([]netip.Prefix, error) { return engineSubnets(cli) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return p
}

// claimSubnet is the first /24 of base, from base's .1.0/24 up, whose lock
// file in dir it could take and that none of inUse's subnets overlaps.
// release lets the lock go. inUse is asked after a lock is taken, so a
// subnet a network holds at that moment is never handed out.
func claimSubnet(base netip.Prefix, dir string, inUse func() ([]netip.Prefix, error)) (netip.Prefix, func(), error) {
	if !base.Addr().Is4() || base.Bits() != 16 || base.Masked() != base {
		return netip.Prefix{}, nil, fmt.Errorf("test subnets are /24s of an IPv4 /16, and %s is not one", base)
	}
	b := base.Addr().As4()
	for k := 1; k < 255; k++ {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{b[0], b[1], byte(k), 0}), 24)
		lock := filepath.Join(dir, "mesh-test-subnet-"+strings.ReplaceAll(p.String(), "/", "_")+".lock")
		f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return netip.Prefix{}, nil, fmt.Errorf("the lock of test subnet %s: %w", p, err)
		}
		// A lock of the open file, not of the process: another test of
		// this process opening the file again is refused it too.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue
			}
			return netip.Prefix{}, nil, fmt.Errorf("lock test subnet %s (%s): %w", p, lock, err)
		}
		release := func() { _ = f.Close() } // closing the file lets the lock go
		held, err := inUse()
		if err != nil {
			release()
			return netip.Prefix{}, nil, err
		}
		if overlapsAny(p, held) {
			release()
			continue
		}
		return p, release, nil
	}
	return netip.Prefix{}, nil, fmt.Errorf("no /24 of %s is free for a test: each is held by another test or by a network in the engine (docker network ls; a killed run's are called mesh-NODE)", base)
}

// engineSubnets is the subnets the engine's networks hold.
func engineSubnets(cli *client.Client) ([]netip.Prefix, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	list, err := cli.NetworkList(ctx, client.NetworkListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list the engine's networks: %w", err)
	}
	var held []netip.Prefix
	for _, n := range list.Items {
		for _, c := range n.IPAM.Config {
			if c.Subnet.IsValid() {
				held = append(held, c.Subnet)
			}
		}
	}
	return held, nil
}

func overlapsAny(p netip.Prefix, held []netip.Prefix) bool {
	for _, h := range held {
		if p.Overlaps(h) {
			return true
		}
	}
	return false
}
