package host

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// missingAppliers are the kinds among names the host does not hold: no
// kind registered from host/<kind>.go, or no applier in an engine.
func missingAppliers(e *Engine, names []string) []string {
	var out []string
	for _, name := range names {
		if _, ok := hostKinds[name]; !ok || e.Appliers[name] == nil {
			out = append(out, name)
		}
	}
	return out
}

// TestEveryKindHasAnApplier: every kind spec registers has its applier in
// an engine (with or without the node's container network); a kind without
// one trips the check.
func TestEveryKindHasAnApplier(t *testing.T) {
	t.Parallel()
	var names []string
	for _, k := range spec.Kinds() {
		names = append(names, k.Name)
	}
	e := NewEngine(Services{Root: t.TempDir()})
	if missing := missingAppliers(e, names); len(missing) != 0 {
		t.Errorf("kinds without an applier: %v (register one from host/KIND.go)", missing)
	}
	e = NewEngine(Services{Root: t.TempDir(), Node: "alpha", Subnet: DefaultSubnet})
	if missing := missingAppliers(e, names); len(missing) != 0 {
		t.Errorf("with containers, kinds without an applier: %v", missing)
	}
	if missing := missingAppliers(e, append(names, "dummy")); !slices.Equal(missing, []string{"dummy"}) {
		t.Errorf("a kind without an applier is not found missing: %v", missing)
	}
}

// TestContainerKindsWithoutAnEngineSaySo: on a host whose services hold no
// container engine, containers and the network fail saying the host has
// none, in an apply and in a preview.
func TestContainerKindsWithoutAnEngineSaySo(t *testing.T) {
	t.Parallel()
	e := NewEngine(Services{Root: t.TempDir()})
	ctr := spec.Resource{Name: "m:container:web", Kind: spec.KindContainer, Module: "m", Spec: &spec.ContainerSpec{Name: "web", Image: "w:1"}}
	resources := []spec.Resource{spec.NodeNetwork("alpha"), ctr}
	results, _, _ := e.Apply(context.Background(), resources, nil)
	results = append(results, e.Preview(context.Background(), resources, nil)...)
	for _, r := range results {
		if r.Outcome != spec.Failed || r.Error != errNoEngine.Error() {
			t.Errorf("%s: %s %q, want it failed saying the host has no container engine", r.Name, r.Outcome, r.Error)
		}
	}
}

// counted is a kind, registered for these tests only, whose Check counts
// its calls.
const counted = "counted"

func init() {
	spec.Register(spec.Kind{Name: counted, Path: true, New: func() spec.Spec { return &countedSpec{} }})
	registerKind(hostKind{name: counted, applier: func(*Services) Applier { return countedApplier{} }})
}

// countedSpec counts the calls of its Check in checks.
type countedSpec struct {
	Path   string        `json:"path"`
	checks *atomic.Int64 `json:"-"`
}

func (*countedSpec) Kind() string     { return counted }
func (c *countedSpec) Target() string { return c.Path }
func (c *countedSpec) Check() error {
	if c.checks != nil {
		c.checks.Add(1)
	}
	return spec.CheckPath(c.Path)
}
func (c *countedSpec) Fill(func(field, s string) (string, error)) (spec.Spec, error) {
	return c, nil
}
func (*countedSpec) Blobs() []spec.Blob { return nil }
func (*countedSpec) Row() spec.Row      { return spec.Row{} }

// countedApplier holds counted resources: it does nothing.
type countedApplier struct{}

func (countedApplier) Plan(context.Context, spec.Resource) (Result, error) {
	return Result{Outcome: spec.Unchanged}, nil
}
func (countedApplier) Apply(context.Context, spec.Resource, *Writes) (Result, error) {
	return Result{Outcome: spec.Unchanged}, nil
}
func (countedApplier) Remove(context.Context, Applied, []string, *Writes) (Result, error) {
	return Result{Outcome: spec.Removed}, nil
}

// TestCheckOncePerPass: an apply checks each declared resource once, its
// removals and the paths they must spare included, and so does a
// preview.
func TestCheckOncePerPass(t *testing.T) {
	t.Parallel()
	var checks atomic.Int64
	r := spec.Resource{Name: "t:counted:/a", Kind: counted, Module: "t", Spec: &countedSpec{Path: "/a", checks: &checks}}
	previous := []Applied{{Name: "t:counted:/gone", Kind: counted, Path: "/gone"}, {Name: "t:directory:/d", Kind: spec.KindDirectory, Path: "/d"}}
	e := NewEngine(Services{Root: t.TempDir()})
	results, _, _ := e.Apply(context.Background(), []spec.Resource{r}, previous)
	if len(results) != 3 || results[0].Outcome != spec.Unchanged {
		t.Fatalf("results %+v", results)
	}
	if n := checks.Swap(0); n != 1 {
		t.Errorf("an apply checked the resource %d times, want once", n)
	}
	e.Preview(context.Background(), []spec.Resource{r}, previous)
	if n := checks.Swap(0); n != 1 {
		t.Errorf("a preview checked the resource %d times, want once", n)
	}
}

// TestEveryKindIsPlacedOnce: kindOrder places every kind spec registers
// (but the tests' own) once, each registered from host/<kind>.go, and
// numbers them as the apply order wants: directories, files,
// certificates and trust anchors, then the network, then containers, then
// the binary; at one depth a directory before a file, a file beside a
// certificate, a trust anchor after both.
func TestEveryKindIsPlacedOnce(t *testing.T) {
	t.Parallel()
	placed := map[string]int{}
	for _, l := range kindOrder {
		placed[l.kind]++
	}
	for _, k := range spec.Kinds() {
		if k.Name == counted {
			continue
		}
		if placed[k.Name] != 1 {
			t.Errorf("kind %s is placed %d times in kindOrder, want once (add its line in host/kinds.go)", k.Name, placed[k.Name])
		}
		delete(placed, k.Name)
	}
	for name := range placed {
		t.Errorf("kindOrder places %s, which is no kind of spec", name)
	}
	for _, l := range kindOrder {
		if _, ok := hostKinds[l.kind]; !ok {
			t.Errorf("kindOrder places %s, which no host/KIND.go registers", l.kind)
		}
	}
	want := map[string]order{
		spec.KindDirectory:   {0, 0},
		spec.KindFile:        {0, 1},
		spec.KindCertificate: {0, 1},
		spec.KindTrust:       {0, 2},
		spec.KindNetwork:     {1, 0},
		spec.KindContainer:   {2, 0},
		spec.KindEdge:        {2, 1},
		spec.KindBinary:      {3, 0},
		"unplaced":           {0, 2},
	}
	for kind, o := range want {
		if got := orderOf(kind); got != o {
			t.Errorf("%s goes at %+v, want %+v", kind, got, o)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("a kind placed twice is not refused")
		}
	}()
	orders([]kindPlace{{stage, spec.KindFile}, {after, spec.KindFile}})
}

// TestFactsFollowTheirKinds: an apply that creates, changes or removes a
// resource of a kind the facts report (trust, certificate) has them sent
// again at once; one that moves only others, or leaves those unchanged,
// does not.
func TestFactsFollowTheirKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind, outcome string
		want          bool
	}{
		{spec.KindTrust, spec.Created, true},
		{spec.KindCertificate, spec.Changed, true},
		{spec.KindCertificate, spec.Removed, true},
		{spec.KindTrust, spec.Unchanged, false},
		{spec.KindCertificate, spec.Failed, false},
		{spec.KindFile, spec.Created, false},
		{spec.KindContainer, spec.Removed, false},
	} {
		a := &Agent{factsNow: make(chan struct{}, 1)}
		a.factsMoved([]spec.ResourceResult{{Name: "r", Kind: tc.kind, Outcome: tc.outcome}})
		if got := len(a.factsNow) == 1; got != tc.want {
			t.Errorf("%s %s: facts sent again %v, want %v", tc.kind, tc.outcome, got, tc.want)
		}
	}
}
