package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/cli"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// BenchmarkFleetPush pushes to 50 and to 500 simulated nodes: the
// controller is the real binary in its own process; the hosts are
// goroutines in this one, each joined with its own token, credential and
// consumer. Each op is one push, timed from the request to the last node's
// report. It reports the median and p99 of those times and the controller's
// peak RSS.
//
//	go test -run '^$' -bench FleetPush -benchtime 20x ./e2e
func BenchmarkFleetPush(b *testing.B) {
	for _, n := range []int{50, 500} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchFleet(b, n) })
	}
}

func benchFleet(b *testing.B, nodes int) {
	dir := filepath.Join(b.TempDir(), "ctl")
	ctl := start(b, "genesis", "--dir", dir, "--mesh", "bench", "--node", "ctl", "--bus", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--dns", "127.0.0.1:0", "--dns-upstream", deadUpstream, "--address", "127.0.0.1", "--root", b.TempDir(), "--log-level", "warn")
	waitReady(b, ctl, dir)
	op, err := cli.DialOperator(context.Background(), dir)
	if err != nil {
		b.Fatal(err)
	}
	defer op.Close()
	call := func(verb string, req, res any) {
		b.Helper()
		if err := op.Call(verb, req, res); err != nil {
			b.Fatalf("%s: %v", verb, err)
		}
	}
	modDir := b.TempDir()
	os.WriteFile(filepath.Join(modDir, spec.ManifestFile), []byte(`{"name":"motd","version":"1","resources":[{"file":{"path":"/etc/motd","content":"${node}\n"}}]}`), 0o644)
	if _, errOut, code := runMesh(b, "module", "register", "--dir", dir, modDir); code != 0 {
		b.Fatalf("mesh module register: exit %d: %s", code, errOut)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	done := make(chan struct{}, nodes)
	for i := range nodes {
		name := fmt.Sprintf("n%03d", i)
		var tok spec.TokenCreateResult
		call(spec.VerbTokenCreate, spec.TokenCreateRequest{Node: name}, &tok)
		parsed, _ := spec.ParseToken(tok.Token)
		hostDir := filepath.Join(b.TempDir(), "host")
		if err := host.Join(ctx, host.JoinConfig{Dir: hostDir, Token: parsed, Address: "127.0.0.1", Now: time.Now()}); err != nil {
			b.Fatal(err)
		}
		agent, err := host.New(host.Config{Dir: hostDir, Root: b.TempDir(), HeartbeatEvery: 10 * time.Second}, quiet)
		if err != nil {
			b.Fatal(err)
		}
		go func() { agent.Run(ctx); done <- struct{}{} }()
		<-agent.Ready()
		call(spec.VerbAssign, spec.AssignRequest{Module: "motd", Node: name}, &spec.AssignResult{})
	}

	progress := spec.OperatorInbox + ".bench." + strconv.Itoa(nodes)
	events := make(chan *nats.Msg, 4*nodes)
	sub, err := op.Conn().ChanSubscribe(progress, events)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	var times, sends []time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		var res spec.PushResult
		call(spec.VerbPush, spec.PushRequest{Progress: progress}, &res)
		sends = append(sends, time.Since(start))
		want := map[string]bool{}
		for _, n := range res.Nodes {
			if n.Error != "" {
				b.Fatalf("push to %s: %s", n.Node, n.Error)
			}
			want[n.Node] = true
		}
		timeout := time.After(2 * time.Minute)
		for len(want) > 0 {
			select {
			case m := <-events:
				var ev spec.PushEvent
				if json.Unmarshal(m.Data, &ev) == nil && ev.PushID == res.ID {
					delete(want, ev.Report.Node)
				}
			case <-timeout:
				b.Fatalf("%d nodes did not report within 2m", len(want))
			}
		}
		times = append(times, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
	sort.Slice(sends, func(i, j int) bool { return sends[i] < sends[j] })
	b.ReportMetric(float64(sends[len(sends)/2].Microseconds())/1000, "sent-median-ms")
	b.ReportMetric(float64(times[(len(times)*99)/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(procKiB(b, ctl.cmd.Process.Pid, "VmHWM"))/1024, "controller-peak-MiB")
	cancel()
	for range nodes {
		<-done
	}
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
