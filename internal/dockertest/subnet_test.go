package dockertest

import (
	"bufio"
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// The tests here take 10.217.0.0/16; the host's tests 10.214, the
// end-to-end tests' 10.215.
var testBase = netip.MustParsePrefix("10.217.0.0/16")

func none() ([]netip.Prefix, error) { return nil, nil }

func claim(t *testing.T, dir string, inUse func() ([]netip.Prefix, error)) (netip.Prefix, func()) {
	t.Helper()
	p, release, err := claimSubnet(testBase, dir, inUse)
	if err != nil {
		t.Fatal(err)
	}
	return p, release
}

// Each claim is a /24 no other claim holds; one let go is handed out again.
func TestClaimSubnetIsHeldUntilLetGo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, releaseFirst := claim(t, dir, none)
	second, releaseSecond := claim(t, dir, none)
	defer releaseSecond()
	if first != netip.MustParsePrefix("10.217.1.0/24") || second != netip.MustParsePrefix("10.217.2.0/24") {
		t.Fatalf("two claims: %s and %s, want 10.217.1.0/24 and 10.217.2.0/24", first, second)
	}
	releaseFirst()
	again, releaseAgain := claim(t, dir, none)
	defer releaseAgain()
	if again != first {
		t.Errorf("after %s was let go, the next claim is %s", first, again)
	}
}

// A subnet a network holds (or overlaps) is passed over; one a lookup of
// the networks could not tell is an error, and holds nothing.
func TestClaimSubnetPassesOverNetworks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	held := []netip.Prefix{netip.MustParsePrefix("10.217.1.0/24"), netip.MustParsePrefix("10.217.0.0/23"), netip.MustParsePrefix("10.217.3.128/25")}
	p, release := claim(t, dir, func() ([]netip.Prefix, error) { return held, nil })
	defer release()
	if p != netip.MustParsePrefix("10.217.2.0/24") {
		t.Errorf("with %v held: %s, want 10.217.2.0/24", held, p)
	}

	broken := errors.New("the engine does not answer")
	if _, _, err := claimSubnet(testBase, dir, func() ([]netip.Prefix, error) { return nil, broken }); !errors.Is(err, broken) {
		t.Fatalf("a failed lookup: %v, want its error", err)
	}
	next, releaseNext := claim(t, dir, none)
	defer releaseNext()
	if next != netip.MustParsePrefix("10.217.1.0/24") {
		t.Errorf("after a failed lookup the next claim is %s: the failed one kept its lock", next)
	}

	all := func() ([]netip.Prefix, error) { return []netip.Prefix{testBase}, nil }
	if _, _, err := claimSubnet(testBase, dir, all); err == nil || !strings.Contains(err.Error(), "no /24 of 10.217.0.0/16 is free") {
		t.Errorf("every /24 held: %v", err)
	}
	for _, bad := range []string{"10.217.0.0/24", "10.217.1.0/16", "fd00::/16"} {
		if _, _, err := claimSubnet(netip.MustParsePrefix(bad), dir, none); err == nil || !strings.Contains(err.Error(), "/24s of an IPv4 /16") {
			t.Errorf("base %s: %v", bad, err)
		}
	}
}

// Another process holding a subnet's lock (flock(1), as another run of the
// tests would) keeps it from this one; killed, it lets it go.
func TestClaimSubnetAcrossProcesses(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("flock"); err != nil {
		t.Fatal("flock(1) is missing: install util-linux (.ci/run does)")
	}
	dir := t.TempDir()
	other := exec.Command("flock", "-o", filepath.Join(dir, "mesh-test-subnet-10.217.1.0_24.lock"), "sh", "-c", "echo held; exec sleep 60")
	// The lock held by flock alone (-o: the command it runs does not
	// inherit it), so that once flock is reaped the lock is gone; its own
	// process group, so that a kill of the group leaves no sleep behind.
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	kill := func() { _ = syscall.Kill(-other.Process.Pid, syscall.SIGKILL); _ = other.Wait() }
	out, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); line != "held\n" {
		t.Fatalf("the other process did not take the lock: %q %v", line, err)
	}
	p, release := claim(t, dir, none)
	release()
	if p == netip.MustParsePrefix("10.217.1.0/24") {
		t.Fatalf("claimed %s while another process holds it", p)
	}
	kill()
	p, release = claim(t, dir, none)
	defer release()
	if p != netip.MustParsePrefix("10.217.1.0/24") {
		t.Errorf("after the other process was killed: %s, want 10.217.1.0/24 again", p)
	}
}

// Against the engine: the subnets a lookup finds held include the one a
// network was just made on, so Subnet passes it over.
func TestEngineSubnetsFindsTheNetworks(t *testing.T) {
	t.Parallel()
	cli := Client(t)
	mine := Subnet(t, cli, testBase)
	name := "mesh-dockertest-" + unique(t)
	ctx := context.Background()
	if _, err := cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge",
		IPAM: &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{Subnet: mine}}}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := cli.NetworkRemove(context.Background(), name, client.NetworkRemoveOptions{}); err != nil {
			t.Errorf("remove network %s: %v", name, err)
		}
	})
	held, err := engineSubnets(cli)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(held, mine) {
		t.Errorf("the engine's subnets %v lack %s, which network %s holds", held, mine, name)
	}
}
