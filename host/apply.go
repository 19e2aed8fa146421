package host

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
)

// BlobFetcher fetches the content of a blob by digest, writing it to w in
// order as it arrives (a chunk at a time: never the whole blob in memory);
// the engine verifies size and digest itself, keeping nothing that fails.
type BlobFetcher interface {
	Fetch(ctx context.Context, digest string, size int64, w io.Writer) error
}

// Applied is the host's record of one resource it applied (kept in
// state.json).
type Applied struct {
	Name   string `json:"name"`
	Kind   string `json:"kind"`
	Path   string `json:"path"`
	Digest string `json:"digest"` // the resource's Digest() when it was applied; "" when its apply failed
	// OnRemove is a directory's on_remove: what its removal does with what
	// it holds that nothing declares.
	OnRemove string `json:"on_remove,omitempty"`
	// Certificate is a certificate's name: its removal has certmagic stop
	// managing it.
	Certificate string `json:"certificate,omitempty"`
}

// applied is the record of r, applied (digest given) or tried.
func applied(r spec.Resource, digest string) Applied {
	a := Applied{Name: r.Name, Kind: r.Kind, Path: r.Target(), Digest: digest}
	if k, ok := hostKinds[r.Kind]; ok && k.record != nil && r.Spec != nil {
		k.record(r.Spec, &a)
	}
	return a
}

// Result is what planning, applying or removing one resource came to: its
// outcome (spec.Created, spec.Changed or spec.Unchanged; spec.Removed for
// a removal) and, where there is more to say, a note (a container started
// again and why it had stopped; a directory left in place with what it
// holds).
type Result struct {
	Outcome string
	Note    string
}

// Applier holds one kind of resource. It is made for an engine (see
// NewEngine) with what its kind needs of the host's Services. Every call
// ends when its ctx does.
type Applier interface {
	// Plan says what Apply would do and changes nothing.
	Plan(ctx context.Context, r spec.Resource) (Result, error)
	// Apply makes the machine hold r, which passed Check, and says which
	// of Created, Changed or Unchanged it was.
	Apply(ctx context.Context, r spec.Resource, w *Writes) (Result, error)
	// Remove removes what a was. It never takes what is still declared:
	// held are the paths of the files and directories declared now.
	Remove(ctx context.Context, a Applied, held []string, w *Writes) (Result, error)
}

// hostKind is how the host holds one kind of resource, registered from init in
// host/<kind>.go; kindOrder places it.
type hostKind struct {
	name string
	// record, when set, keeps in the record what removing a resource of
	// the kind needs of its spec.
	record func(s spec.Spec, a *Applied)
	// applier makes the kind's applier for an engine, taking what the
	// kind needs of the host's services.
	applier func(*Services) Applier
	// facts, when set, fills the kind's part of the facts the host sends
	// (trust_installed, certificates): what resources of the kind hold
	// now, read with the host's services among held, the resources of
	// the declaration the host holds. A kind that sets it has the facts
	// sent again at once when an apply moves one of its resources
	// (Agent.factsMoved).
	facts func(s *Services, held []spec.Resource, f *spec.Facts)
	// run, when set, makes what the kind keeps running beside the agent
	// (kindRun): one an agent, made with it.
	run func(kindHost) kindRun
}

// hostKinds are the kinds the host holds, by name.
var hostKinds = map[string]hostKind{}

// registerKind adds a kind the host holds; each host/<kind>.go calls it from
// init. A kind spec does not know, or registered twice, is a programming
// error: register panics.
func registerKind(k hostKind) {
	if _, ok := spec.KindNamed(k.name); !ok {
		panic(fmt.Sprintf("host: kind %q is not a kind of spec", k.name))
	}
	if _, dup := hostKinds[k.name]; dup || k.applier == nil {
		panic(fmt.Sprintf("host: kind %q registered twice or without an applier", k.name))
	}
	hostKinds[k.name] = k
}

// Writes counts the mutating calls an apply made: to the filesystem
// (create, write, rename, chmod, chown, mkdir, remove) and to the
// container engine.
type Writes struct{ N int }

// add counts one mutating call; a nil *Writes counts nothing.
func (w *Writes) add() {
	if w != nil {
		w.N++
	}
}

// Engine applies declarations under its root: a resource's path p is
// filepath.Join(root, p), reached from root without ever leaving it (see
// tree.locate: a link among p's parents is followed only while it stays
// under root). The root is "/" in production.
type Engine struct {
	// Appliers hold each kind, by name: one per registered kind.
	Appliers map[string]Applier
	// Panicked hears of a panic recovered in an applier, with its stack;
	// the resource fails with it. Nil: it is only that failure.
	Panicked func(what string, v any, stack []byte)
	services Services
}

// NewEngine is an engine holding resources with the host's services s.
func NewEngine(s Services) *Engine {
	e := &Engine{services: s.withDefaults()}
	e.makeAppliers()
	return e
}

func (e *Engine) makeAppliers() {
	e.Appliers = make(map[string]Applier, len(hostKinds))
	for name, k := range hostKinds {
		e.Appliers[name] = k.applier(&e.services)
	}
}

// checked is a declared resource, checked once for the whole pass.
type checked struct {
	*spec.Resource       // in the slice the pass was given
	err            error // its Check
	path           bool  // its kind's target is a path on the machine
	order                // its kind's
}

// check checks each resource once, and puts them in apply order (see
// kindOrder): by phase, then parents first (by path depth, a directory
// before a file at the same depth, then by path). The sort is stable, so resources that compare
// equal keep their declared order.
func check(resources []spec.Resource) []checked {
	out := make([]checked, len(resources))
	for i := range resources {
		r := &resources[i]
		c := checked{Resource: r, err: r.Check(), order: orderOf(r.Kind)}
		if k, ok := spec.KindNamed(r.Kind); ok {
			c.path = k.Path
		}
		out[i] = c
	}
	slices.SortStableFunc(out, func(a, b checked) int {
		if d := int(a.phase) - int(b.phase); d != 0 {
			return d
		}
		at, bt := a.Target(), b.Target()
		if d := pathDepth(at) - pathDepth(bt); d != 0 {
			return d
		}
		if d := int(a.rank) - int(b.rank); d != 0 {
			return d
		}
		return strings.Compare(at, bt)
	})
	return out
}

// Apply makes the machine hold exactly resources: it applies each (a
// resource that fails Check is Failed with its cause) and removes every
// resource in previous that is not declared any more (by name). One failure
// does not stop the others. It returns one result per declared resource (in
// apply order: parents first) and then one per removed resource (deepest
// first), the new record of what is applied, and how many mutating calls
// it made. Each resource is checked once.
func (e *Engine) Apply(ctx context.Context, resources []spec.Resource, previous []Applied) ([]spec.ResourceResult, []Applied, int) {
	p := e.apply(ctx, resources, previous)
	return p.results, p.record, p.writes
}

// pass is what one Apply came to, and whether a resource failed for a
// cause outside the node (see outside): the agent tries the pass again.
type pass struct {
	results []spec.ResourceResult
	record  []Applied
	writes  int
	outside bool
}

// apply is Apply, saying whether a failure's cause was outside the node.
func (e *Engine) apply(ctx context.Context, resources []spec.Resource, previous []Applied) pass {
	for _, ap := range e.Appliers {
		if p, ok := ap.(preparer); ok {
			p.prepare(ctx, resources)
			defer p.finish()
		}
	}
	var w Writes
	var p pass
	results := make([]spec.ResourceResult, 0, len(resources))
	record := make([]Applied, 0, len(resources))
	before := make(map[string]Applied, len(previous))
	for _, a := range previous {
		before[a.Name] = a
	}

	items := check(resources)
	for _, it := range items {
		r := *it.Resource
		res := spec.ResourceResult{Name: r.Name, Kind: r.Kind}
		var out Result
		err := it.err
		if err == nil {
			out, err = e.applyChecked(ctx, r, &w)
		}
		if err != nil {
			res.Outcome, res.Error = spec.Failed, err.Error()
			p.outside = p.outside || outside(err)
		} else {
			res.Outcome, res.Note = out.Outcome, out.Note
		}
		results = append(results, res)

		switch {
		case err == nil:
			record = append(record, applied(r, r.Digest()))
		case it.err == nil:
			// It may have created something before it failed: keep it on
			// record so that a declaration without it still removes it.
			record = append(record, applied(r, ""))
		default:
			// A malformed resource touched nothing; what an earlier
			// declaration applied under its name stays on record.
			if a, ok := before[r.Name]; ok {
				a.Digest = ""
				record = append(record, a)
			}
		}
	}

	var held []string // the paths declared, made when first needed
	for _, rm := range removals(items, previous) {
		a := rm.Applied
		res := spec.ResourceResult{Name: a.Name, Kind: a.Kind, Outcome: spec.Removed}
		err := ctx.Err()
		if err != nil {
			err = fmt.Errorf("remove %s: %w", a.Path, err)
		} else if !rm.handedOver {
			if held == nil {
				held = heldPaths(items)
			}
			var out Result
			out, err = e.removeOne(ctx, a, held, &w)
			res.Note = out.Note
		}
		if err != nil {
			res.Outcome, res.Error = spec.Failed, err.Error()
			record = append(record, a) // tried again next time
			p.outside = p.outside || outside(err)
		}
		results = append(results, res)
	}
	p.results, p.record, p.writes = results, record, w.N
	return p
}

// Preview says what Apply would do, writing nothing: Created, Changed or
// Unchanged per resource (Failed with the cause where Apply would fail
// before writing), and Removed for each previous resource no longer
// declared.
func (e *Engine) Preview(ctx context.Context, resources []spec.Resource, previous []Applied) []spec.ResourceResult {
	results := make([]spec.ResourceResult, 0, len(resources))
	items := check(resources)
	for _, it := range items {
		res := spec.ResourceResult{Name: it.Name, Kind: it.Kind}
		out, err := Result{}, it.err
		if err == nil {
			out, err = e.planOne(ctx, *it.Resource)
		}
		if err != nil {
			res.Outcome, res.Error = spec.Failed, err.Error()
		} else {
			res.Outcome, res.Note = out.Outcome, out.Note
		}
		results = append(results, res)
	}
	for _, rm := range removals(items, previous) {
		results = append(results, spec.ResourceResult{Name: rm.Name, Kind: rm.Kind, Outcome: spec.Removed})
	}
	return results
}

func (e *Engine) applier(kind string) (Applier, error) {
	ap, ok := e.Appliers[kind]
	if !ok || ap == nil {
		return nil, fmt.Errorf("no applier for kind %q", kind)
	}
	return ap, nil
}

// preparer is an Applier that reads what it holds once per apply (a
// container engine's listing) rather than once per resource.
type preparer interface {
	prepare(ctx context.Context, resources []spec.Resource)
	finish()
}

// applyChecked applies r, which passed Check.
func (e *Engine) applyChecked(ctx context.Context, r spec.Resource, w *Writes) (out Result, err error) {
	defer e.recovered("apply "+r.Name, &err)
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("apply %s: %w", r.Target(), err)
	}
	ap, err := e.applier(r.Kind)
	if err != nil {
		return Result{}, err
	}
	return ap.Apply(ctx, r, w)
}

// planOne plans r, which passed Check.
func (e *Engine) planOne(ctx context.Context, r spec.Resource) (out Result, err error) {
	defer e.recovered("plan "+r.Name, &err)
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("plan %s: %w", r.Target(), err)
	}
	ap, err := e.applier(r.Kind)
	if err != nil {
		return Result{}, err
	}
	return ap.Plan(ctx, r)
}

func (e *Engine) removeOne(ctx context.Context, a Applied, held []string, w *Writes) (out Result, err error) {
	defer e.recovered("remove "+a.Name, &err)
	ap, err := e.applier(a.Kind)
	if err != nil {
		return Result{}, err
	}
	return ap.Remove(ctx, a, held, w)
}

// heldPaths are the paths of the well-formed resources whose kinds have
// paths (never nil).
func heldPaths(items []checked) []string {
	held := []string{}
	for _, it := range items {
		if it.path && it.err == nil {
			held = append(held, it.Target())
		}
	}
	return held
}

// removal is a previous resource no longer declared by its name.
type removal struct {
	Applied
	// handedOver: a resource of the same kind at the same path is declared
	// under another name (it moved from one module to another). The old name
	// goes from the record; what is on disk stays, for the new one holds it.
	handedOver bool
	order
}

// removals is what previous holds that items no longer declare (by name),
// in the reverse of the apply order: containers, then the network, then
// files and directories, deepest path first.
func removals(items []checked, previous []Applied) []removal {
	declared := make(map[string]bool, len(items))
	for _, it := range items {
		declared[it.Name] = true
	}
	var out []removal
	var held map[[2]string]bool // kind and path of each well-formed resource, made when first needed
	for _, a := range previous {
		if declared[a.Name] {
			continue
		}
		if held == nil {
			held = make(map[[2]string]bool, len(items))
			for _, it := range items {
				if it.err == nil {
					held[[2]string{it.Kind, it.Target()}] = true
				}
			}
		}
		rm := removal{Applied: a, handedOver: held[[2]string{a.Kind, a.Path}], order: orderOf(a.Kind)}
		out = append(out, rm)
	}
	slices.SortStableFunc(out, func(a, b removal) int {
		if d := int(b.phase) - int(a.phase); d != 0 {
			return d
		}
		if d := pathDepth(b.Path) - pathDepth(a.Path); d != 0 {
			return d
		}
		if d := int(b.rank) - int(a.rank); d != 0 {
			return d
		}
		return strings.Compare(b.Path, a.Path)
	})
	return out
}

func pathDepth(p string) int { return strings.Count(p, "/") }
