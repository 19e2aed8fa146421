package host_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/spec"
)

// declaration327 is 327 resources: 27 directories (3 with 8 each inside)
// and 300 files of 1 KiB spread across them, a mix of modes.
func declaration327() []spec.Resource {
	var dirs, resources []spec.Resource
	for i := range 3 {
		top := fmt.Sprintf("/srv/s%d", i)
		dirs = append(dirs, dirDecl(top, 0o755))
		for j := range 8 {
			dirs = append(dirs, dirDecl(fmt.Sprintf("%s/d%d", top, j), []spec.Mode{0o755, 0o750, 0o700, 0o2775}[j%4]))
		}
	}
	resources = append(resources, dirs...)
	for i := range 300 {
		content := bytes.Repeat([]byte(fmt.Sprintf("line %03d of a small config file\n", i)), 32)[:1024]
		p := fmt.Sprintf("%s/f%03d", dirs[i%len(dirs)].Target(), i)
		resources = append(resources, fileDecl(p, []spec.Mode{0o644, 0o600, 0o640, 0o755}[i%4], string(content)))
	}
	return resources
}

// setup327 applies the 327 resources under a fresh root and returns the
// engine, the declaration and the record.
func setup327(b *testing.B) (*host.Engine, []spec.Resource, []host.Applied) {
	b.Helper()
	e := host.NewEngine(host.Services{Root: b.TempDir()})
	resources := declaration327()
	if len(resources) != 327 {
		b.Fatalf("%d resources, want 327", len(resources))
	}
	results, record, _ := e.Apply(context.Background(), resources, nil)
	for _, r := range results {
		if r.Outcome != spec.Created {
			b.Fatalf("setup: %s %s %q", r.Name, r.Outcome, r.Error)
		}
	}
	return e, resources, record
}

// Invariant 3: applying a declaration that the machine already holds makes
// no write at all, and says so for each resource.
func BenchmarkNoopApply327(b *testing.B) {
	e, resources, record := setup327(b)
	ctx := context.Background()
	writes := 0
	b.ReportAllocs()
	for b.Loop() {
		results, next, n := e.Apply(ctx, resources, record)
		if n != 0 {
			b.Fatalf("a no-op apply made %d writes", n)
		}
		if len(results) != len(resources) || len(next) != len(record) {
			b.Fatalf("%d results and %d record entries, want %d", len(results), len(next), len(resources))
		}
		for _, r := range results {
			if r.Outcome != spec.Unchanged {
				b.Fatalf("a no-op apply says %s %s %q", r.Name, r.Outcome, r.Error)
			}
		}
		writes += n
		record = next
	}
	b.ReportMetric(float64(writes)/float64(b.N), "writes/op")
}

// A preview of a declaration the machine already holds.
func BenchmarkPlan327(b *testing.B) {
	e, resources, record := setup327(b)
	b.ReportAllocs()
	for b.Loop() {
		results := e.Preview(context.Background(), resources, record)
		if len(results) != len(resources) {
			b.Fatalf("%d results, want %d", len(results), len(resources))
		}
		for _, r := range results {
			if r.Outcome != spec.Unchanged {
				b.Fatalf("a preview says %s %s %q", r.Name, r.Outcome, r.Error)
			}
		}
	}
}
