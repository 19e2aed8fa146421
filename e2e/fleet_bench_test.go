package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// BenchmarkFleetPush pushes to fleets of simulated hosts (newFleet: the
// controller is the real binary in its own process, the hosts are real
// agents in this one, each with its own token and credential, their
// state on tmpfs, one copy of each roster in memory
// for all: host.RosterPool), 50 and 1,000 unless MESH_BENCH_FLEET
// lists other sizes ("50,1000"). Each op is three pushes, each timed from the request:
//
//   - change: a new version of module motd, assigned to every node: to the
//     last node's report (change-p50-ms, change-p99-ms), to the push's
//     reply (change-reply-p50-ms: the controller's part, slowed by the
//     hosts that take the first declarations on the same cores) and the
//     bytes of the declarations it published (change-bytes/push);
//   - roster: a route assigned to or taken from one node, so only the
//     mesh's names change: one roster message and no declaration, to the
//     push's reply (roster-reply-p50-ms) and to the last host whose
//     resolver was given the new names (roster-p50-ms), and its bytes
//     (roster-bytes/push);
//   - same: a push that changes nothing, once every host took the roster
//     (the hosts share this machine's cores: one still taking the last
//     roster slows the controller as a host on its own machine would
//     not): to its reply, every node "unchanged, not sent" (same-p50-ms,
//     same-p99-ms).
//
// It reports besides how long the fleet took to join (join-s) and be
// assigned motd (assign-s), and the controller's peak RSS
// (controller-peak-MiB). Then it stops the controller and starts it again
// with only --dir: from that start to its /healthz ready (restart-ready-s)
// and to every host heard again (reheard-s), a change to motd then to
// the last report (restart-change-ms), and the restarted controller's
// peak RSS (restart-peak-MiB), the whole fleet reconnecting at once. bench/figures.sh prints them with their ratios
// to the smallest fleet.
//
// MESH_BENCH_VALUES=N has motd declare N more files, each of a setting of
// its own, secret (sealed to each node) with MESH_BENCH_SEALED=1: the same
// push with and without sealing.
//
//	go test -run '^$' -bench FleetPush -benchtime 5x -timeout 60m ./e2e
func BenchmarkFleetPush(b *testing.B) {
	sizes := []int{50, 1000}
	if env := os.Getenv("MESH_BENCH_FLEET"); env != "" {
		sizes = nil
		for _, s := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 || n >= spec.MaxNodes {
				b.Fatalf("MESH_BENCH_FLEET=%q: want fleet sizes from 1 to %d, comma-separated", env, spec.MaxNodes-1)
			}
			sizes = append(sizes, n)
		}
	}
	var motd motdValues
	if env := os.Getenv("MESH_BENCH_VALUES"); env != "" {
		n, err := strconv.Atoi(env)
		if err != nil || n < 0 || n > 100 {
			b.Fatalf("MESH_BENCH_VALUES=%q: want how many more files motd declares, 0 to 100", env)
		}
		motd = motdValues{Files: n, Sealed: os.Getenv("MESH_BENCH_SEALED") == "1"}
	}
	for _, n := range sizes {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchFleet(b, n, motd) })
	}
}

func benchFleet(b *testing.B, nodes int, motd motdValues) {
	f := newFleetWith(b, nodes, motd)
	// Said at once, so a push that fails below still leaves the joins' figure.
	b.Logf("%d hosts joined in %s (%.1f ms a host), assigned in %s", nodes, f.joined, float64(f.joined.Microseconds())/1000/float64(nodes), f.assigned)
	web := b.TempDir()
	if err := os.WriteFile(filepath.Join(web, spec.ManifestFile), []byte(`{"name":"web","version":"1","routes":[{"name":"web","port":80}],"resources":[]}`), 0o644); err != nil {
		b.Fatal(err)
	}
	if _, errOut, code := runMesh(b, "module", "register", "--dir", f.dir, web); code != 0 {
		b.Fatalf("mesh module register: exit %d: %s", code, errOut)
	}
	f.push(b, false)
	// MESH_BENCH_PROFILES=DIR keeps the controller's heap with the fleet
	// connected and settled, its CPU over the first change, and its heap
	// once the fleet is heard again after the restart.
	profiles := os.Getenv("MESH_BENCH_PROFILES")
	if profiles != "" {
		f.profile(b, "heap", profiles, fmt.Sprintf("heap-%d.pb.gz", nodes))
	}
	sentBytes := func() int {
		return f.metric(b, "mesh_declaration_bytes_total") + f.metric(b, "mesh_roster_bytes_total")
	}

	var change, changeReply, roster, rosterReply, same []time.Duration
	var changeBytes, rosterBytes int
	// b.Loop runs this function once, not again with a larger b.N: one
	// fleet joins per size.
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		f.registerMotd(b, strconv.Itoa(i+2))
		before := sentBytes()
		watched := f.watchCPU(b, i == 0, profiles, "change")
		b.StartTimer()
		p := f.push(b, false)
		b.StopTimer()
		watched(p.last)
		if p.sent != nodes {
			b.Fatalf("a change to motd sent to %d nodes, want %d", p.sent, nodes)
		}
		change = append(change, p.last)
		changeReply = append(changeReply, p.replied)
		changeBytes += sentBytes() - before

		verb := spec.Assign
		if i%2 == 1 {
			verb = spec.Unassign
		}
		fleetCall(b, f, verb, spec.AssignRequest{Module: "web", Node: f.nodes[0]})
		before = sentBytes()
		zones := f.zones.Load()
		watched = f.watchCPU(b, i == 0, profiles, "roster")
		began := time.Now()
		b.StartTimer()
		p = f.push(b, false)
		// The roster travels alone: no node's declaration
		// changes, so no node reports. Timed to the push's reply, and to
		// the last host serving the new names (each host gives its
		// resolver the zone of each roster it takes).
		// As long as a push's reports may take: every simulated host
		// applies the delta in this one process, a minute more a
		// thousand hosts.
		within := 2*time.Minute + time.Duration(nodes/1000)*time.Minute
		// Polled every millisecond rather than through poll.Until, whose
		// backoff would add up to 200 ms to the time measured.
		for f.zones.Load()-zones < int64(nodes) {
			if time.Since(began) > within {
				b.Fatalf("%d of %d hosts took the new roster within %s", f.zones.Load()-zones, nodes, within)
			}
			time.Sleep(time.Millisecond)
		}
		if nodes >= 2000 {
			b.Logf("every host took the new roster %s after the push", time.Since(began).Round(time.Millisecond))
		}
		b.StopTimer()
		watched(time.Since(began))
		if p.sent != 0 {
			b.Fatalf("a roster change sent declarations to %d nodes, want none: the roster travels as its own message", p.sent)
		}
		rosterReply = append(rosterReply, p.replied)
		roster = append(roster, time.Since(began))
		rosterBytes += sentBytes() - before

		b.StartTimer()
		p = f.push(b, false)
		if p.sent != 0 {
			b.Fatalf("a push that changed nothing sent to %d nodes", p.sent)
		}
		same = append(same, p.replied)
	}
	peak := float64(procKiB(b, f.controllerPid(b), "VmHWM")) / 1024

	// The controller restarted: every host reconnects at once. Timed from
	// its start to every host heard again, and then a change to all of
	// them to the last report.
	began, ready := f.restart(b)
	reheard := f.heardSince(b, began, 5*time.Minute)
	if profiles != "" {
		f.profile(b, "heap", profiles, fmt.Sprintf("heap-reheard-%d.pb.gz", nodes))
	}
	f.registerMotd(b, "after-restart")
	p := f.push(b, false)
	if p.sent != nodes {
		b.Fatalf("a change after the restart sent to %d nodes, want %d", p.sent, nodes)
	}
	restartPeak := float64(procKiB(b, f.controllerPid(b), "VmHWM")) / 1024

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(quantile(change, 50)), "change-p50-ms")
	b.ReportMetric(ms(quantile(change, 99)), "change-p99-ms")
	b.ReportMetric(ms(quantile(changeReply, 50)), "change-reply-p50-ms")
	b.ReportMetric(float64(changeBytes)/float64(len(change)), "change-bytes/push")
	b.ReportMetric(ms(quantile(rosterReply, 50)), "roster-reply-p50-ms")
	b.ReportMetric(ms(quantile(roster, 50)), "roster-p50-ms")
	b.ReportMetric(float64(rosterBytes)/float64(len(roster)), "roster-bytes/push")
	b.ReportMetric(ms(quantile(same, 50)), "same-p50-ms")
	b.ReportMetric(ms(quantile(same, 99)), "same-p99-ms")
	b.ReportMetric(f.joined.Seconds(), "join-s")
	b.ReportMetric(f.assigned.Seconds(), "assign-s")
	b.ReportMetric(peak, "controller-peak-MiB")
	b.ReportMetric(reheard.Seconds(), "reheard-s")
	b.ReportMetric(ready.Seconds(), "restart-ready-s")
	b.ReportMetric(ms(p.last), "restart-change-ms")
	b.ReportMetric(restartPeak, "restart-peak-MiB")
	b.Logf("%d simulated hosts, their state on tmpfs: %v; one copy of each roster held in this process for all of them (host.RosterPool)", nodes, f.shm)
}

// quantile is the q-th percentile of ds (nearest rank).
func quantile(ds []time.Duration, q int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, (len(s)*q)/100)]
}

// watchCPU, when on, measures the CPU the controller and the simulated
// hosts (this process) spend on one step of the benchmark (step: change,
// roster), from now until the function it returns is called with the
// step's time; that says it and reports it. With profiles (a directory:
// MESH_BENCH_PROFILES) it profiles both too: the controller's first 30 s
// (cpu-STEP-N.pb.gz) and the hosts' whole step (hosts-cpu-STEP-N.pb.gz).
// On this machine they share its two cores: a step is as long as the two
// together take.
func (f *fleet) watchCPU(b *testing.B, on bool, profiles, step string) func(took time.Duration) {
	if !on {
		return func(time.Duration) {}
	}
	nodes := len(f.nodes)
	ctlProfile := make(chan struct{})
	hostsProfile := false
	if profiles != "" {
		go func() {
			defer close(ctlProfile)
			f.profile(b, "profile?seconds=30", profiles, fmt.Sprintf("cpu-%s-%d.pb.gz", step, nodes))
		}()
		// The profile's request cannot be seen to begin from here: this
		// lets it reach the controller before the step begins (a late
		// one only shortens the profile).
		time.Sleep(200 * time.Millisecond)
		hostsProfile = startCPUProfile(b, filepath.Join(profiles, fmt.Sprintf("hosts-cpu-%s-%d.pb.gz", step, nodes)))
	} else {
		close(ctlProfile)
	}
	ctl, hosts := procCPU(b, f.controllerPid(b)), procCPU(b, os.Getpid())
	return func(took time.Duration) {
		ctl, hosts = procCPU(b, f.controllerPid(b))-ctl, procCPU(b, os.Getpid())-hosts
		if hostsProfile {
			pprof.StopCPUProfile()
		}
		b.Logf("%s, %d hosts: the controller used %.1f s of CPU, the simulated hosts %.1f s (%.2f ms a host), in %s", step, nodes,
			ctl.Seconds(), hosts.Seconds(), float64(hosts.Microseconds())/1000/float64(nodes), took.Round(time.Millisecond))
		b.ReportMetric(ctl.Seconds(), step+"-controller-cpu-s")
		b.ReportMetric(hosts.Seconds(), step+"-hosts-cpu-s")
		<-ctlProfile
	}
}

// procCPU is the CPU process pid has used, user and system, from
// /proc/PID/stat (in the kernel's clock ticks, 100 a second here).
func procCPU(b testing.TB, pid int) time.Duration {
	body, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command, which is in parentheses and may
	// hold spaces and parentheses itself: utime and stime are the 14th
	// and 15th of the line.
	f := strings.Fields(string(body[bytes.LastIndexByte(body, ')')+1:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// startCPUProfile profiles this process, the simulated hosts, into file
// until pprof.StopCPUProfile; false when it cannot.
func startCPUProfile(b testing.TB, file string) bool {
	w, err := os.Create(file)
	if err != nil {
		b.Error(err)
		return false
	}
	if err := pprof.StartCPUProfile(w); err != nil {
		w.Close()
		b.Error(err)
		return false
	}
	b.Cleanup(func() { w.Close() })
	return true
}

// procKiB reads a field of /proc/PID/status, in KiB.
func procKiB(b testing.TB, pid int, field string) int {
	body, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	return 0
}
