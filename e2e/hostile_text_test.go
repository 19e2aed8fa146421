package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestAHostileNodeForgesNoScreen: a node whose facts, heartbeat and report
// hold terminal sequences, a bidi override and lines of their own (one
// that would erase status's verdict and print a forged all-clear) reaches
// node list, node show and status, in text and in --json, with none of
// them raw; the JSON carries the texts as sent.
func TestAHostileNodeForgesNoScreen(t *testing.T) {
	t.Parallel()
	const (
		forged   = "\x1b[2K\x1b[1A\x1b[2Kall clear: 4 node(s) heard, current, nothing pending, no failure, no hold\x1b[8m"
		reversed = "beta\u202egnp.exe"
		ownLine  = "ok\nall clear: 9 node(s) heard\r"
	)
	m, publish := liarMesh(t)
	publish(spec.NodeSubject("beta", spec.KindFacts), spec.Facts{Node: "beta", Time: time.Now(), Arch: "amd64", OS: "linux",
		Kernel: forged, Hostname: reversed, Distro: ownLine, CPUModel: forged, Cores: 2, Errors: []string{forged}})
	publish(spec.NodeSubject("beta", spec.KindHeartbeat), spec.Heartbeat{Node: "beta", Time: time.Now(), AppliedSeq: 1, HostVersion: forged,
		Protocol: spec.Protocol, IntervalMS: 500})
	publish(spec.NodeSubject("beta", spec.KindReport), spec.Report{Node: "beta", Seq: 1, Time: time.Now(), Results: []spec.ResourceResult{
		{Name: "m:file:/" + reversed, Kind: spec.KindFile, Outcome: spec.Failed, Error: forged + ownLine}}})
	poll.Until(t, 20*time.Second, "node show beta shows the hostile facts and report", func() error {
		out, errOut, _ := runMesh(t, "node", "show", "--dir", m.dir, "--json", "beta")
		var beta spec.Node
		if err := json.Unmarshal([]byte(out), &beta); err != nil {
			return fmt.Errorf("%v: %s", err, errOut)
		}
		if beta.Facts != nil && beta.Facts.Kernel == forged && beta.HostVersion == forged && beta.LastReport != nil && len(beta.LastReport.Results) == 1 &&
			beta.LastReport.Results[0].Error == forged+ownLine {
			return nil
		}
		return errors.New(out)
	})
	d := "--dir=" + m.dir
	for _, args := range [][]string{{"node", "list", d}, {"node", "list", d, "--json"}, {"node", "show", d, "beta"}, {"node", "show", d, "--json", "beta"},
		{"status", d}, {"status", d, "--json"}} {
		out, errOut, _ := runMesh(t, args...)
		for _, raw := range []string{"\x1b", "\u202e", "\r"} {
			if strings.Contains(out+errOut, raw) {
				t.Errorf("mesh %s printed %q raw:\n%s%s", strings.Join(args, " "), raw, out, errOut)
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "all clear: 9") {
				t.Errorf("mesh %s printed a line of the node's: %q", strings.Join(args, " "), line)
			}
		}
		if !strings.Contains(out, `\u001b[2K`) && !strings.Contains(out, `\x1b[2K`) && !strings.Contains(out, `\u202e`) && !strings.Contains(out, `\x0a`) {
			t.Errorf("mesh %s shows no hostile text escaped:\n%s", strings.Join(args, " "), out)
		}
	}
}
