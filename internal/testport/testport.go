// Package testport gives tests listening ports that stay theirs across a
// stop and a restart of what listens on them. It is test support only.
//
// A daemon started on port 0 records the port the kernel chose and binds it
// again when it restarts; between the two, the kernel may hand the port to
// another process, for its listener or as the local port of an outgoing
// connection, since it comes from the kernel's ephemeral range. A port from
// here is outside that range, so the kernel never hands it out, and it is
// held by a lock on a file in the temporary directory until the test ends,
// so no other test, in this process or another, is given it meanwhile.
package testport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The pool is the ports from poolLow to poolHigh outside the kernel's
// ephemeral range; below poolLow are the ports services on a developer's
// machine tend to take (8080, 9090, 5432...).
const (
	poolLow  = 20000
	poolHigh = 65535
	// minPool is the fewest ports the pool may have: every test of a
	// run holds its own at once (an end-to-end test up to a dozen).
	minPool = 1000
	// rangeFile is where Linux keeps its ephemeral range.
	rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
)

// Port is a port the test holds until it ends: outside the kernel's
// ephemeral range, free for TCP and for UDP on every address when it is
// handed out, and given to no other test while this one holds it. The
// lock is let go by a cleanup registered here, so it runs after the test's
// own cleanups registered later (those that stop what listens on it).
func Port(t testing.TB) int {
	t.Helper()
	ports, err := pool()
	if err != nil {
		t.Fatal(err)
	}
	p, release, err := claim(os.TempDir(), ports)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return p
}

// Addr is host:port for a Port the test holds.
func Addr(t testing.TB, host string) string {
	t.Helper()
	return net.JoinHostPort(host, strconv.Itoa(Port(t)))
}

// pool is the ports tests are given, in the order they are tried.
func pool() ([]int, error) {
	body, err := os.ReadFile(rangeFile)
	if err != nil {
		return nil, fmt.Errorf("test ports are chosen outside the kernel's ephemeral range, which could not be read: %w", err)
	}
	return outside(string(body))
}

// outside is the ports from poolLow to poolHigh outside the ephemeral range
// ephemeral (the text of ip_local_port_range: "low high"), in order, or an
// error saying what to do if there are fewer than minPool.
func outside(ephemeral string) ([]int, error) {
	fields := strings.Fields(ephemeral)
	if len(fields) != 2 {
		return nil, fmt.Errorf("%s holds %q, not two ports", rangeFile, ephemeral)
	}
	low, errLow := strconv.Atoi(fields[0])
	high, errHigh := strconv.Atoi(fields[1])
	if errLow != nil || errHigh != nil || low < 1 || high > 65535 || low > high {
		return nil, fmt.Errorf("%s holds %q, not a range of ports", rangeFile, ephemeral)
	}
	var ports []int
	for p := poolLow; p <= poolHigh; p++ {
		if p < low || p > high {
			ports = append(ports, p)
		}
	}
	if len(ports) < minPool {
		return nil, fmt.Errorf("the kernel's ephemeral port range %d-%d (%s) leaves %d ports of %d-%d for tests, fewer than %d: narrow it, e.g. sysctl -w net.ipv4.ip_local_port_range=\"32768 60999\"",
			low, high, rangeFile, len(ports), poolLow, poolHigh, minPool)
	}
	return ports, nil
}

// claim is the first of ports whose lock file in dir it could take and
// that binds free for TCP and UDP; release lets the lock go. The port is
// bound after the lock is taken, so one another process listens on at
// that moment (a killed run's straggler, a service of the machine) is
// passed over.
func claim(dir string, ports []int) (int, func(), error) {
	for _, p := range ports {
		lock := filepath.Join(dir, "mesh-test-port-"+strconv.Itoa(p)+".lock")
		f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return 0, nil, fmt.Errorf("the lock of test port %d: %w", p, err)
		}
		// A lock of the open file, not of the process: another test of
		// this process opening the file again is refused it too.
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				continue
			}
			return 0, nil, fmt.Errorf("lock test port %d (%s): %w", p, lock, err)
		}
		release := func() { _ = f.Close() } // closing the file lets the lock go
		if !free(p) {
			release()
			continue
		}
		return p, release, nil
	}
	return 0, nil, fmt.Errorf("no test port is free: each of %d ports is held by another test or bound by a process (ss -tulpn shows which)", len(ports))
}

// free is whether port binds on every address, for TCP and for UDP (a
// resolver listens on both).
func free(port int) bool {
	addr := ":" + strconv.Itoa(port)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
