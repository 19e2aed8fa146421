package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// idleFor is how long the controllers are left with nothing to do
// before their resident memory is read.
const idleFor = 20 * time.Second

// BenchmarkControllersFailover runs three controller processes on
// loopback (newControllers) with one host, and first reads each
// controller's resident memory, its process and its children's, once
// it was left idleFor after a push (ctl-idle-MiB: the largest; each is
// logged). Each op then kills the leader with SIGKILL and times from
// the kill to the first push through another controller that succeeds
// (failover-p50-ms, failover-max-ms, over the ops), and runs the killed
// controller again with no flag, waiting until one leads. bench/
// controllers.sh runs it.
//
//	go test -run '^$' -bench ControllersFailover -benchtime 5x -timeout 30m ./e2e
func BenchmarkControllersFailover(b *testing.B) {
	c := newControllers(b, 1)
	c.pushText(b, 0, "v0", 60*time.Second)
	c.converged(b, 0, "v0", 30*time.Second)
	// Nothing to wait for but time: the memory of controllers that have
	// been idle.
	time.Sleep(idleFor)
	most := 0
	for i, d := range c.ds {
		kib := treeKiB(b, d.cmd.Process.Pid, "VmRSS")
		b.Logf("%s idle: %.1f MiB resident", c.nodes[i], float64(kib)/1024)
		most = max(most, kib)
	}
	b.ReportMetric(float64(most)/1024, "ctl-idle-MiB")

	var took []time.Duration
	b.ResetTimer()
	for n := range b.N {
		lead := c.leader(b, 60*time.Second)
		other := (lead + 1) % 3
		killed := time.Now()
		c.kill(b, lead)
		text := fmt.Sprintf("v%d", n+1)
		c.pushText(b, other, text, 90*time.Second)
		took = append(took, time.Since(killed))
		b.StopTimer()
		c.converged(b, other, text, 30*time.Second)
		c.restart(b, lead)
		c.leader(b, 60*time.Second)
		b.StartTimer()
	}
	b.StopTimer()
	b.Logf("failover, the leader killed to a push through another: %v", took)
	b.ReportMetric(float64(quantile(took, 50).Milliseconds()), "failover-p50-ms")
	b.ReportMetric(float64(quantile(took, 100).Milliseconds()), "failover-max-ms")
	c.checkSeqs(b)
}

// treeKiB is a field of /proc/PID/status, in KiB, summed over pid and
// every process under it (mesh controller is a launcher, its child the
// controller).
func treeKiB(b testing.TB, pid int, field string) int {
	total := procKiB(b, pid, field)
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		body, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended
		}
		for _, kid := range strings.Fields(string(body)) {
			if child, err := strconv.Atoi(kid); err == nil {
				total += treeKiB(b, child, field)
			}
		}
	}
	return total
}
