package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/dockertest"
)

// BenchmarkRosterOnlyApply is the apply of a declaration whose only change
// is the roster (a route-only module assigned to the node and unassigned,
// in turns), on a node running 20 containers, against the same on a node
// holding 20 files and no container: the push as the operator waits for it
// (ms/push), the host's own apply (apply-µs), the changing calls the apply
// counted (writes/op) and the engine's lifecycle events for the node
// (engine-events/op). The goal for both counts is zero. The roster
// travels as its own message, so such a change sends the node no
// declaration at all ("unchanged, not sent"): apply-µs is 0.
//
//	MESH_TEST_DOCKER=1 go test -run '^$' -bench RosterOnlyApply -benchtime 20x ./e2e
func BenchmarkRosterOnlyApply(b *testing.B) {
	cli := dockertest.Client(b)
	k := dockerSlot(b)
	node, addr := fmt.Sprintf("alpha%d", k), fmt.Sprintf("10.216.%d.1", k)
	loopbackAddress(b, addr)
	tag := fmt.Sprintf("mesh-test/bench-%d:1", k)
	dockertest.Build(b, cli, tag, nil)
	archive := filepath.Join(b.TempDir(), "image.tar")
	dockertest.Save(b, cli, tag, archive)
	dockertest.RemoveNode(cli, node)
	b.Cleanup(func() { dockertest.RemoveNode(cli, node) })

	modules := b.TempDir()
	write := func(name, manifest string) string {
		dir := filepath.Join(modules, name)
		os.MkdirAll(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, "module.json"), []byte(manifest), 0o644); err != nil {
			b.Fatal(err)
		}
		return dir
	}
	var ctrs, files []string
	for i := range 20 {
		ctrs = append(ctrs, fmt.Sprintf(`{"container":{"name":"c%d","image":%q,"archive":"image.tar","command":["/bin/sleep","1000000"]}}`, i, tag))
		files = append(files, fmt.Sprintf(`{"file":{"path":"/srv/f%d","content":"%d"}}`, i, i))
	}
	twenty := write("twenty", `{"name":"twenty","version":"1","resources":[`+strings.Join(ctrs, ",")+`]}`)
	if err := os.Link(archive, filepath.Join(twenty, "image.tar")); err != nil {
		b.Fatal(err)
	}
	filesOnly := write("files", `{"name":"files","version":"1","resources":[`+strings.Join(files, ",")+`]}`)
	route := write("extra", `{"name":"extra","version":"1","routes":[{"name":"extra","port":9}],"resources":[]}`)

	m := newMesh(b, "--node", node, "--docker", cli.DaemonHost(), "--root", b.TempDir(), "--address", addr, "--subnet", fmt.Sprintf("10.215.%d.0/24", 2*k))
	run := func(args ...string) {
		if _, errOut, code := runMesh(b, args...); code != 0 {
			b.Fatalf("mesh %s: %s", strings.Join(args, " "), errOut)
		}
	}
	run("module", "register", "--dir", m.dir, twenty, filesOnly, route)

	for _, bc := range []struct{ name, module string }{{"containers=20", "twenty"}, {"files=20", "files"}} {
		b.Run(bc.name, func(b *testing.B) {
			run("assign", "--dir", m.dir, bc.module, node)
			if o, code := pushJSON(b, m.dir); code != 0 || !o.OK {
				b.Fatalf("first push: %+v", o)
			}
			defer run("unassign", "--dir", m.dir, bc.module, node)
			defer func() {
				if o, code := pushJSON(b, m.dir); code != 0 {
					b.Errorf("last push: %+v", o)
				}
			}()
			assigned := false
			var writes, events int
			var apply []int64
			var push []time.Duration
			since := time.Now()
			b.ResetTimer()
			for range b.N {
				verb := "assign"
				if assigned {
					verb = "unassign"
				}
				assigned = !assigned
				b.StopTimer()
				run(verb, "--dir", m.dir, "extra", node)
				b.StartTimer()
				began := time.Now()
				o, code := pushJSON(b, m.dir)
				push = append(push, time.Since(began))
				if code != 0 || !o.OK || len(o.Nodes) != 1 || (o.Nodes[0].Report == nil && !o.Nodes[0].Unchanged) {
					b.Fatalf("push: %+v", o)
				}
				// A host that takes roster messages is sent none: no apply.
				if rep := o.Nodes[0].Report; rep != nil {
					writes += rep.Writes
					apply = append(apply, rep.ApplyMicros)
				} else {
					apply = append(apply, 0)
				}
			}
			b.StopTimer()
			events = len(engineEvents(b, cli, since, node))
			if assigned {
				run("unassign", "--dir", m.dir, "extra", node)
			}
			slices.Sort(apply)
			slices.Sort(push)
			b.ReportMetric(float64(push[len(push)/2].Microseconds())/1000, "ms/push")
			b.ReportMetric(float64(apply[len(apply)/2]), "apply-µs")
			b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
			b.ReportMetric(float64(events)/float64(b.N), "engine-events/op")
		})
	}
}
