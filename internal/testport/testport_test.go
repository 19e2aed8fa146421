package testport

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
)

// childDir, set in a re-run of this test binary, makes it a process that
// claims ports of its own (childPorts' list, childCount of them) in that
// lock directory, prints them, and holds them until its stdin closes.
const (
	childDir   = "TESTPORT_CHILD_DIR"
	childPorts = "TESTPORT_CHILD_PORTS"
	childCount = "TESTPORT_CHILD_COUNT"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDir); dir != "" {
		os.Exit(child(dir))
	}
	os.Exit(m.Run())
}

func child(dir string) int {
	ports := parsePorts(os.Getenv(childPorts))
	n, _ := strconv.Atoi(os.Getenv(childCount))
	var got []string
	for range n {
		p, release, err := claim(dir, ports)
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		defer release()
		got = append(got, strconv.Itoa(p))
	}
	fmt.Println(strings.Join(got, ","))
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // held until the parent lets go
	return 0
}

func parsePorts(s string) []int {
	var ports []int
	for _, f := range strings.Split(s, ",") {
		if p, err := strconv.Atoi(f); err == nil {
			ports = append(ports, p)
		}
	}
	return ports
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ",")
}

// ports are n ports of the real pool the test holds: no other test binds
// them, so a test of claim may use them as its candidates, with a lock
// directory of its own.
func ports(t *testing.T, n int) []int {
	t.Helper()
	var ps []int
	for range n {
		ps = append(ps, Port(t))
	}
	return ps
}

func mustClaim(t *testing.T, dir string, candidates []int) (int, func()) {
	t.Helper()
	p, release, err := claim(dir, candidates)
	if err != nil {
		t.Fatal(err)
	}
	return p, release
}

// A port handed out is outside the kernel's ephemeral range, and free: it
// binds for TCP and UDP on loopback, as a daemon of the test binds it.
func TestPortIsOutsideTheEphemeralRange(t *testing.T) {
	t.Parallel()
	body, err := os.ReadFile(rangeFile)
	if err != nil {
		t.Fatal(err)
	}
	var low, high int
	if _, err := fmt.Sscan(string(body), &low, &high); err != nil {
		t.Fatalf("%s: %q: %v", rangeFile, body, err)
	}
	a, b := Port(t), Port(t)
	if a == b {
		t.Fatalf("two ports held at once are both %d", a)
	}
	for _, p := range []int{a, b} {
		if p >= low && p <= high {
			t.Errorf("port %d is in the ephemeral range %d-%d", p, low, high)
		}
		addr := Addr(t, "127.0.0.1")
		if !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("Addr: %s", addr)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d handed out does not bind for TCP: %v", p, err)
		}
		l.Close()
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d handed out does not bind for UDP: %v", p, err)
		}
		u.Close()
	}
}

// The pool is the ports from 20000 up outside the ephemeral range; a range
// that leaves too few is refused, saying how to narrow it.
func TestOutside(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ephemeral   string
		first, last int
		n           int
		err         string
	}{
		{ephemeral: "32768\t60999\n", first: 20000, last: 65535, n: 12768 + 4536},
		{ephemeral: "40000 65535", first: 20000, last: 39999, n: 20000},
		{ephemeral: "1024 19999", first: 20000, last: 65535, n: 45536},
		{ephemeral: "20000 64000", first: 64001, last: 65535, n: 1535},
		{ephemeral: "1024 65535", err: "leaves 0 ports of 20000-65535 for tests, fewer than 1000: narrow it"},
		{ephemeral: "20500 65000", first: 20000, last: 65535, n: 1035},
		{ephemeral: "20100 65000", err: "leaves 635 ports of 20000-65535 for tests"},
		{ephemeral: "60999", err: "not two ports"},
		{ephemeral: "high low", err: "not a range of ports"},
		{ephemeral: "60999 32768", err: "not a range of ports"},
		{ephemeral: "0 70000", err: "not a range of ports"},
	} {
		ports, err := outside(tc.ephemeral)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error saying %q", tc.ephemeral, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.ephemeral, err)
			continue
		}
		if len(ports) != tc.n || ports[0] != tc.first || ports[len(ports)-1] != tc.last {
			t.Errorf("%q: %d ports %d..%d, want %d ports %d..%d", tc.ephemeral, len(ports), ports[0], ports[len(ports)-1], tc.n, tc.first, tc.last)
		}
		var low, high int
		fmt.Sscan(tc.ephemeral, &low, &high)
		for _, p := range ports {
			if p >= low && p <= high {
				t.Errorf("%q: port %d is in the ephemeral range", tc.ephemeral, p)
				break
			}
		}
	}
}

// A claimed port is given to no other claim while held; let go, it is
// given again.
func TestClaimIsHeldUntilLetGo(t *testing.T) {
	t.Parallel()
	dir, ps := t.TempDir(), ports(t, 3)
	first, releaseFirst := mustClaim(t, dir, ps)
	second, releaseSecond := mustClaim(t, dir, ps)
	defer releaseSecond()
	if first == second {
		t.Fatalf("two claims held at once are both %d", first)
	}
	if first != ps[0] || second != ps[1] {
		t.Fatalf("two claims of %v: %d and %d, want %d and %d", ps, first, second, ps[0], ps[1])
	}
	releaseFirst()
	again, releaseAgain := mustClaim(t, dir, ps)
	defer releaseAgain()
	if again != first {
		t.Errorf("after %d was let go, the next claim is %d", first, again)
	}
}

// A port something else has bound, for TCP or for UDP, on any address, is
// passed over; when every one is, the claim fails and says so.
func TestClaimPassesOverBoundPorts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		network, host string
	}{
		{"tcp", "127.0.0.1"},
		{"tcp", "127.0.0.2"},
		{"tcp", "0.0.0.0"},
		{"udp", "127.0.0.1"},
		{"udp", "0.0.0.0"},
	} {
		t.Run(tc.network+"_"+tc.host, func(t *testing.T) {
			t.Parallel()
			dir, ps := t.TempDir(), ports(t, 2)
			addr := net.JoinHostPort(tc.host, strconv.Itoa(ps[0]))
			var bound interface{ Close() error }
			var err error
			if tc.network == "tcp" {
				bound, err = net.Listen("tcp", addr)
			} else {
				bound, err = net.ListenPacket("udp", addr)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer bound.Close()
			p, release := mustClaim(t, dir, ps)
			release()
			if p != ps[1] {
				t.Errorf("with %s %s bound: claimed %d, want %d", tc.network, addr, p, ps[1])
			}
			if _, _, err := claim(dir, ps[:1]); err == nil || !strings.Contains(err.Error(), "no test port is free") {
				t.Errorf("with the only port bound: %v", err)
			}
			bound.Close()
			// The port is this test's claim, but a process that does not
			// claim (another package's test binding a port of its own)
			// may hold it a moment: the claim is asked again until then.
			poll.Until(t, 5*time.Second, "the closed port claimed again", func() error {
				p, release := mustClaim(t, dir, ps)
				release()
				if p == ps[0] {
					return nil
				}
				return fmt.Errorf("once %s %s was closed: claimed %d, want %d", tc.network, addr, p, ps[0])
			})
		})
	}
}

// Claims of two processes at once never hand out the same port; the ports
// a process held are free again once it is gone.
func TestClaimAcrossProcesses(t *testing.T) {
	t.Parallel()
	const each = 10
	dir, ps := t.TempDir(), ports(t, 2*each)
	other := exec.Command(os.Args[0], "-test.run=^$")
	other.Env = append(os.Environ(), childDir+"="+dir, childPorts+"="+joinPorts(ps), childCount+"="+strconv.Itoa(each))
	stdin, err := other.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := other.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); other.Wait() }()

	mine, releases := make([]int, each), make([]func(), each)
	defer func() {
		for _, release := range releases {
			if release != nil {
				release()
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, each)
	for i := range each {
		wg.Go(func() {
			p, release, err := claim(dir, ps)
			if err != nil {
				errs <- err
			}
			mine[i], releases[i] = p, release
		})
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err != nil || strings.HasPrefix(line, "error:") {
		t.Fatalf("the other process: %q %v", line, err)
	}
	theirs := parsePorts(strings.TrimSpace(line))
	all := slices.Concat(mine, theirs)
	slices.Sort(all)
	if len(theirs) != each || !slices.Equal(all, slices.Sorted(slices.Values(ps))) {
		t.Fatalf("this process claimed %v, the other %v: together not each of %v once", mine, theirs, ps)
	}
	if _, _, err := claim(dir, theirs[:1]); err == nil {
		t.Fatalf("claimed %d while the other process holds it", theirs[0])
	}
	stdin.Close()
	if err := other.Wait(); err != nil {
		t.Fatalf("the other process: %v", err)
	}
	p, release := mustClaim(t, dir, theirs[:1])
	release()
	if p != theirs[0] {
		t.Errorf("after the other process ended: %d, want %d", p, theirs[0])
	}
}
