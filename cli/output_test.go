package cli

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/rogpeppe/go-internal/txtar"
)

var update = flag.Bool("update", false, "rewrite testdata/output.txtar with what the code prints")

// TestOutputGolden holds what the CLI prints for fixed answers: node list
// and show, status with and without the all-clear, push reports. Each case
// is one file of testdata/output.txtar; go test -run TestOutputGolden
// -update rewrites it.
func TestOutputGolden(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	heard := at.Add(-3 * time.Second)
	facts := &spec.Facts{Node: "alpha", Time: at, Arch: "amd64", OS: "linux", Kernel: "6.1.0", Distro: "Debian GNU/Linux", DistroVer: "12",
		CPUModel: "AMD EPYC", Cores: 2, MemoryBytes: 24 << 30, DiskBytes: 250 << 30, DiskFree: 80 << 30, Virtual: "virtual (KVM)", UptimeSecond: 3600, Hostname: "vm",
		Capabilities: []string{spec.CapContainers}, Engine: "20.10.24+dfsg1, API 1.41", Subnet: "10.213.0.0/24",
		TrustInstalled: "/usr/local/share/ca-certificates/mesh-mesh.crt", Intermediate: "7d0804e7bdd7c66fe60e43e654cb364f",
		Certificates: []spec.HeldCert{{Name: "web.alpha.internal", Path: "/srv/web/tls", Serial: "2db53405aabe5ec6", NotAfter: at.Add(30 * 24 * time.Hour)}}}
	alpha := spec.Node{Name: "alpha", Address: "10.0.0.1", Joined: at.Add(-time.Hour), SealKey: "x25519:6Vq8Pm0ZrCiY9BAH5pE6BvAFbC8s4yDu2jsHXiNRC0k", LastHeard: &heard, HeardAgo: "3s", HeartbeatMS: 1000, SilentAfterMS: 3000,
		HostVersion: "1a2b3c4d5e6f7a8b9c0d", Protocol: 1, ProtocolKnown: true, AppliedSeq: 4, RosterSeq: 3, SentSeq: 4, Facts: facts,
		LastReport: &spec.Report{Node: "alpha", Time: at, Seq: 4, Writes: 0, Results: []spec.ResourceResult{
			{Name: "motd:file:/etc/motd", Outcome: spec.Unchanged}, {Name: "web:directory:/srv", Outcome: spec.Failed, Error: "mkdir /srv: read-only file system"},
			{Name: "web:container:web", Outcome: spec.Changed, Note: "started again: it had exited with code 137 at 2026-11-30T11:59:00Z"}}}}
	never := spec.Node{Name: "beta", Address: "10.0.0.2", Joined: at.Add(-time.Minute)}
	foreign := spec.Node{Name: "gamma", Address: "10.0.0.3", Joined: at, LastHeard: &heard, HeardAgo: "3s", SilentAfterMS: 30000, HostVersion: "ffff", Protocol: 99}
	st := func(clear bool) spec.StatusResult {
		r := spec.StatusResult{Time: at, Versions: map[string][]string{"1a2b3c4d5e6f": {"alpha"}}, AllClear: clear, Problems: []string{},
			Intermediate: "7d0804e7bdd7c66fe60e43e654cb364f",
			Nodes: []spec.NodeStatus{{Node: "alpha", LastHeard: &heard, Heard: "3s ago", HeartbeatMS: 10000, SentSeq: 4, AppliedSeq: 4, State: "current",
				Failures: []string{}, HostVersion: "1a2b3c4d5e6f", Protocol: 1, ProtocolKnown: true, Intermediate: "7d0804e7bdd7c66fe60e43e654cb364f",
				Notes: []string{"web:container:web: started again: it had exited with code 137 at 2026-11-30T11:59:00Z"}}}}
		if !clear {
			r.Versions["0f0f0f0f0f0f"] = []string{"beta"}
			r.Nodes = append(r.Nodes, spec.NodeStatus{Node: "beta", LastHeard: &heard, Heard: "45s ago", Silent: true, HeartbeatMS: 1000, SentSeq: 5, AppliedSeq: 3,
				State: "applying", Pending: true, Failures: []string{"web:directory:/srv: mkdir /srv: read-only file system",
					"certificate 0a for www.example.org expires in 71h0m0s and was not renewed"},
				Held: true, HeldReason: "disk swap", HostVersion: "0f0f0f0f0f0f", Protocol: 1, ProtocolKnown: true, Intermediate: "1f"})
			r.Problems = []string{"beta has not been heard for 45s (it sends a heartbeat every 1s)", "beta has not reported applying declaration 5 (it applied 3)",
				"beta has changes pending: mesh push beta",
				"beta holds intermediate 1f, the mesh signs with 7d0804e7bdd7c66fe60e43e654cb364f now: mesh push beta hands it the new chain",
				"beta failed 1 resource(s)",
				"beta has 1 certificate(s) expiring within a week or expired, not renewed", "beta is held (disk swap)"}
		}
		return r
	}
	report := spec.Report{Node: "alpha", Seq: 5, Writes: 3, Results: []spec.ResourceResult{
		{Name: "a:file:/a", Outcome: spec.Created}, {Name: "a:file:/b", Outcome: spec.Changed}, {Name: "a:file:/c", Outcome: spec.Removed},
		{Name: "a:file:/d", Outcome: spec.Unchanged}, {Name: "a:file:/e", Outcome: spec.Failed, Error: "open /e: permission denied"},
		{Name: "a:directory:/f", Outcome: spec.Removed, Note: "left in place with the 1 entry it holds: data.db; its on_remove is keep"},
		{Name: "a:container:web", Outcome: spec.Changed, Note: "started again: it had exited with code 1"}}}
	preview := report
	preview.Preview, preview.Writes = true, 0

	cases := map[string]func(*bytes.Buffer) error{
		"node-list":       func(b *bytes.Buffer) error { return printNodeList(b, []spec.Node{alpha, never, foreign}) },
		"node-show":       func(b *bytes.Buffer) error { return printNode(b, alpha) },
		"node-show-never": func(b *bytes.Buffer) error { return printNode(b, never) },
		"node-show-older": func(b *bytes.Buffer) error { return printNode(b, foreign) },
		"node-show-waiting": func(b *bytes.Buffer) error {
			n := alpha
			n.SentSeq, n.LastReport = 5, &spec.Report{Node: "alpha", Time: at, Seq: 5, Results: []spec.ResourceResult{},
				Waiting: "it names roster 7, which this host has not got: it asked the controller for it and applies the declaration when it arrives"}
			return printNode(b, n)
		},
		"status-clear":     func(b *bytes.Buffer) error { return printStatus(b, st(true)) },
		"status-not-clear": func(b *bytes.Buffer) error { return printStatus(b, st(false)) },
		"status-public": func(b *bytes.Buffer) error {
			r := st(false)
			r.Nodes, r.Versions = r.Nodes[:1], map[string][]string{"1a2b3c4d5e6f": {"alpha"}}
			r.Problems = []string{"public name www.example.org: edge alpha has no certificate for it: acme: no such host; tried again at 2026-11-30T12:01:00Z (in 1m0s)"}
			r.Public = []spec.PublicStatus{
				{Name: "drive.example.org", Node: "beta", Module: "files", Edges: []spec.PublicEdge{
					{Edge: "alpha", State: spec.EdgeValid, NotAfter: at.Add(60 * 24 * time.Hour)},
					{Edge: "gamma", State: spec.EdgeValid, NotAfter: at.Add(72 * time.Hour), Error: "connection refused\x1b[2K", ErrorAt: at.Add(-time.Minute), Retry: at.Add(9 * time.Minute)}}},
				{Name: "www.example.org", Node: "beta", Module: "web", Edges: []spec.PublicEdge{
					{Edge: "alpha", State: spec.EdgeFailed, Error: "acme: no such host", ErrorAt: at, Retry: at.Add(time.Minute)},
					{Edge: "gamma", State: "not reported"}}},
			}
			if err := printStatus(b, r); err != nil {
				return err
			}
			r.Public, r.AllClear, r.Problems = []spec.PublicStatus{{Name: "drive.example.org", Node: "beta", Module: "files", Edges: []spec.PublicEdge{}}}, true, []string{}
			return printStatus(b, r)
		},
		"push-report":  func(b *bytes.Buffer) error { printReport(b, report, false); return nil },
		"push-dry-run": func(b *bytes.Buffer) error { printReport(b, preview, false); return nil },
		"push-refused": func(b *bytes.Buffer) error {
			printReport(b, spec.Report{Node: "alpha", Seq: 6, Refused: "sequence 6 is lower than the kept 9"}, false)
			return nil
		},
		"release-list": func(b *bytes.Buffer) error {
			v1 := spec.Release{Digest: "3f2a9c0d1e4b5a6978c0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6", GOOS: "linux", GOARCH: "amd64",
				Go: "go1.26.8", Size: 31 << 20, Published: at.Add(-time.Hour)}
			v2 := spec.Release{Digest: "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d", GOOS: "linux", GOARCH: "arm64",
				Go: "go1.26.8", Size: 29<<20 + 512<<10, Published: at}
			printPublished(b, spec.ReleasePublishResult{Release: v2})
			printPublished(b, spec.ReleasePublishResult{Release: v1, Existed: true})
			if err := printReleases(b, nil); err != nil {
				return err
			}
			return printReleases(b, []spec.Release{v1, v2})
		},
		"release-roll": func(b *bytes.Buffer) error {
			v2 := "3f2a9c0d1e4b5a6978c0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6"
			t := func(d time.Duration) *time.Time { x := at.Add(d); return &x }
			nodes := func(states ...spec.RollNode) spec.Roll {
				return spec.Roll{ID: 3, Digest: v2, HealthyWithinMS: 60000, State: spec.RollRunning, Started: at, Nodes: states}
			}
			pending := func(n string) spec.RollNode { return spec.RollNode{Node: n, State: spec.RollPending} }
			steps := []spec.Roll{
				nodes(pending("beta"), pending("gamma"), pending("alpha")),
				nodes(spec.RollNode{Node: "beta", State: spec.RollSending, Started: t(0)}, pending("gamma"), pending("alpha")),
				nodes(spec.RollNode{Node: "beta", State: spec.RollHealthy, Started: t(0), Ended: t(3200 * time.Millisecond)},
					spec.RollNode{Node: "gamma", State: spec.RollSkipped, Cause: "arch arm64 release, node is amd64", Ended: t(4 * time.Second)},
					spec.RollNode{Node: "alpha", State: spec.RollSending, Started: t(4 * time.Second)}),
				nodes(spec.RollNode{Node: "beta", State: spec.RollHealthy, Started: t(0), Ended: t(3200 * time.Millisecond)},
					spec.RollNode{Node: "gamma", State: spec.RollSkipped, Cause: "arch arm64 release, node is amd64", Ended: t(4 * time.Second)},
					spec.RollNode{Node: "alpha", State: spec.RollHealthy, Started: t(4 * time.Second), Ended: t(9 * time.Second)}),
			}
			steps[3].State, steps[3].Ended = spec.RollDone, t(9*time.Second)
			printRollStart(b, steps[0], false)
			for i := range steps {
				prev := spec.Roll{}
				if i > 0 {
					prev = steps[i-1]
				}
				printRollChanges(b, prev, steps[i])
			}
			printRollEnd(b, steps[3])
			halted := nodes(spec.RollNode{Node: "beta", State: spec.RollFailed, Started: t(0), Ended: t(2 * time.Second),
				Cause: "beta fell back from 3f2a9c0d1e4b: exited at start: exit status 2"}, pending("gamma"), pending("alpha"))
			halted.State, halted.Cause = spec.RollHalted, halted.Nodes[0].Cause
			printRollChanges(b, steps[1], halted)
			printRollEnd(b, halted)
			if err := printRoll(b, halted); err != nil {
				return err
			}
			halted.State = spec.RollAborted
			printRollEnd(b, halted)
			return printReverted(b, []spec.PushNode{{Node: "beta", Seq: 7, Resources: 3}, {Node: "delta", Seq: 2, Unchanged: true}})
		},
		"status-rolling": func(b *bytes.Buffer) error {
			r := st(true)
			r.AllClear = false
			r.Nodes[0].Binary = "3f2a9c0d1e4b5a6978c0d1e2f3a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6"
			r.Nodes[0].Fallbacks = []spec.Fallback{{Digest: r.Nodes[0].Binary, Reason: "not ready within 1m0s", At: at.Add(-time.Minute)}}
			r.Roll = &spec.Roll{ID: 3, Digest: r.Nodes[0].Binary, State: spec.RollHalted, Nodes: []spec.RollNode{{Node: "alpha", State: spec.RollFailed}}}
			r.Problems = []string{"roll 3 of 3f2a9c0d1e4b halted at alpha: alpha fell back from 3f2a9c0d1e4b: not ready within 1m0s (mesh release roll --resume or --abort)",
				"alpha is declared release 3f2a9c0d1e4b and its launcher gave up on it (not ready within 1m0s): it runs 1a2b3c4d5e6f"}
			return printStatus(b, r)
		},
		"ca-domain-list": func(b *bytes.Buffer) error {
			printDomainAdded(b, "example.org", spec.CADomainAddResult{Intermediate: "7d0804e7bdd7c66fe60e43e654cb364f"})
			for _, res := range []spec.CADomainListResult{
				{Domains: []spec.CADomain{{Name: "example.net", Added: at.Add(-time.Hour), Signed: false}, {Name: "example.org", Added: at, Signed: true}},
					Permitted: []string{"internal", "mesh-bus", "example.org"}, Intermediate: "7d0804e7bdd7c66fe60e43e654cb364f"},
				{Domains: []spec.CADomain{}, Permitted: []string{"internal", "mesh-bus"}, Intermediate: "1f"},
				{Domains: []spec.CADomain{}, Permitted: []string{}, Intermediate: "2e"},
			} {
				if err := printDomains(b, res); err != nil {
					return err
				}
			}
			return nil
		},
		"ca-certs": func(b *bytes.Buffer) error {
			if err := printCerts(b, []spec.IssuedCert{
				{Serial: "313bca615528b9daeaf98ded60c53ae4", Node: "alpha", Names: []string{"alpha.internal", "web.alpha.internal"}, NotAfter: at.Add(30 * 24 * time.Hour), Issued: at},
				{Serial: "0a", Node: "beta", Names: []string{"www.example.org"}, NotAfter: at.Add(72 * time.Hour), Issued: at},
			}); err != nil {
				return err
			}
			return printCerts(b, []spec.IssuedCert{})
		},
		"grant-list": func(b *bytes.Buffer) error {
			if err := printGrants(b, spec.GrantListResult{}); err != nil {
				return err
			}
			return printGrants(b, spec.GrantListResult{Grants: []spec.GrantInfo{
				{Provider: "alpha", Consumer: "app-beta", Module: "app", Node: "beta", Grant: "files", MintedAt: at},
				{Provider: "gamma", Consumer: "app-delta", Module: "app", Node: "delta", Grant: "files", MintedAt: at, Orphaned: true}}})
		},
		"cluster-show": func(b *bytes.Buffer) error {
			if err := printRoles(b, nil); err != nil {
				return err
			}
			return printRoles(b, []spec.ControllerRole{
				{Server: "c-1a2b3c4d", Role: "leader", Leader: "c-1a2b3c4d", Peers: 3},
				{Server: "c-5e6f7a8b", Role: "follower", Leader: "c-1a2b3c4d", Peers: 3},
				{Server: "c-9c0d1e2f", Role: "candidate", Peers: 3},
			})
		},
		"token-list": func(b *bytes.Buffer) error {
			if err := printTokens(b, nil, at); err != nil {
				return err
			}
			used, revoked := at.Add(-time.Minute), at.Add(-2*time.Minute)
			return printTokens(b, []spec.TokenInfo{
				{ID: "t0123456789", Node: "beta", Created: at.Add(-time.Hour), Expires: at.Add(time.Hour)},
				{ID: "t1123456789", Node: "ctl2", Created: at.Add(-time.Hour), Expires: at.Add(time.Hour), Controller: true},
				{ID: "t2123456789", Node: "gamma", Created: at.Add(-time.Hour), Expires: at.Add(time.Hour), Used: &used},
				{ID: "t3123456789", Node: "delta", Created: at.Add(-time.Hour), Expires: at.Add(time.Hour), Revoked: &revoked},
				{ID: "t4123456789", Node: "ep\x1bsilon", Created: at.Add(-2 * time.Hour), Expires: at.Add(-time.Hour)},
			}, at)
		},
		"grant-rotate": func(b *bytes.Buffer) error {
			printRotated(b, spec.GrantRotateRequest{Module: "app", Node: "beta"}, spec.GrantRotateResult{Grants: []string{"files"}, Changed: []string{"alpha", "beta"}})
			return nil
		},
		"assign": func(b *bytes.Buffer) error {
			for _, res := range []spec.AssignResult{
				{Changed: []string{"alpha"}, Nodes: 3},
				{Changed: []string{"alpha", "beta", "gamma"}, Nodes: 3},
				{Changed: []string{"alpha", "gamma"}, Nodes: 3},
				{Changed: []string{"alpha"}, Nodes: 1},
				{Changed: []string{}, Nodes: 3},
				{Changed: []string{}, Unknown: `compose node "beta": database is locked`},
				{Changed: []string{"alpha"}, Nodes: 3, Roster: true},
				{Changed: []string{}, Nodes: 3, Roster: true},
				{Changed: []string{"alpha", "beta", "gamma"}, Nodes: 3, Roster: true},
			} {
				printAssigned(b, "hello assigned to alpha", res)
			}
			return nil
		},
	}
	path := filepath.Join("testdata", "output.txtar")
	ar, err := txtar.ParseFile(path)
	if err != nil && !(*update && os.IsNotExist(err)) {
		t.Fatal(err)
	}
	if ar == nil {
		ar = &txtar.Archive{Comment: []byte("What the CLI prints for fixed answers (TestOutputGolden; -update rewrites).\n")}
	}
	want := map[string][]byte{}
	for _, f := range ar.Files {
		want[f.Name] = f.Data
	}
	var files []txtar.File
	order := []string{"node-list", "node-show", "node-show-never", "node-show-older", "node-show-waiting", "status-clear", "status-not-clear", "status-rolling", "status-public", "push-report", "push-dry-run", "push-refused", "assign", "grant-list", "grant-rotate", "token-list", "cluster-show", "ca-domain-list", "ca-certs", "release-list", "release-roll"}
	if len(order) != len(cases) {
		t.Fatalf("%d cases and %d names in their order: a case left out of the order is never checked", len(cases), len(order))
	}
	for _, name := range order {
		var b bytes.Buffer
		if err := cases[name](&b); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		files = append(files, txtar.File{Name: name, Data: b.Bytes()})
		if !*update && !bytes.Equal(want[name], b.Bytes()) {
			t.Errorf("%s differs from testdata/output.txtar (rerun with -update if intended):\n--- got\n%s--- want\n%s", name, b.Bytes(), want[name])
		}
	}
	if *update {
		ar.Files = files
		if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
