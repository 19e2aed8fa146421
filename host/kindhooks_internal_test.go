package host

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// agentFiles are the agent's files that take every kind through its
// registration and hooks (hostKind, kindRun), never by name.
var agentFiles = []string{"agent.go", "roster.go"}

// kindNames are the names declared in the host's files of each kind of
// kindOrder (host/<kind>*.go, tests aside), with the file declaring each,
// and the kind's constant in spec (spec.Kind<Kind>); a name after a dot
// (".name") is a method those files declare on the Agent, or the kind's
// own name, as a field would be named.
func kindNames(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range kindOrder {
		out["Kind"+strings.ToUpper(l.kind[:1])+l.kind[1:]] = "spec"
		out["."+l.kind] = "the kind's name"
		for _, f := range files {
			if !strings.HasPrefix(f, l.kind) || strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range declared(src) {
				out[name] = f
			}
			for _, name := range agentMethods(src) {
				out["."+name] = f
			}
		}
	}
	return out
}

// declared are the names f declares at its top level, methods aside.
func declared(f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				out = append(out, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out = append(out, s.Name.Name)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out = append(out, n.Name)
					}
				}
			}
		}
	}
	return out
}

// agentMethods are the methods f declares on the Agent.
func agentMethods(f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		if d, ok := d.(*ast.FuncDecl); ok && d.Recv != nil {
			if star, ok := d.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Agent" {
					out = append(out, d.Name.Name)
				}
			}
		}
	}
	return out
}

// namesKinds says where src (named file) names a kind: each identifier of
// names it uses, with the file that declares it.
func namesKinds(fset *token.FileSet, file string, src any, names map[string]string) ([]string, error) {
	f, err := parser.ParseFile(fset, file, src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	say := func(id *ast.Ident, from string) {
		out = append(out, fmt.Sprintf("%s names %s (from %s)", fset.Position(id.Pos()), id.Name, from))
	}
	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			// After a dot: spec's kind constants, the Agent's methods
			// declared in a kind's files, and a field named as a kind.
			if x, ok := n.X.(*ast.Ident); ok && x.Name == "spec" && names[n.Sel.Name] == "spec" {
				say(n.Sel, "spec")
			}
			if from, ok := names["."+n.Sel.Name]; ok {
				say(n.Sel, from)
			}
			ast.Inspect(n.X, visit)
			return false
		case *ast.Ident:
			if from, ok := names[n.Name]; ok && from != "spec" && n.Name != "_" {
				say(n, from)
			}
		}
		return true
	}
	ast.Inspect(f, visit)
	return out, nil
}

// TestAgentNamesNoKind: the agent's files name nothing a kind declares
// (its types, functions, values, its spec constant): a kind reaches the
// agent through its registration, its appliers through Services, the
// facts it reports through hostKind.facts and what it runs beside the
// agent through kindRun, so that a kind is its own
// files and one line of kindOrder. A source that names a kind trips the
// check.
func TestAgentNamesNoKind(t *testing.T) {
	t.Parallel()
	names := kindNames(t)
	for _, want := range []string{"edge", "newEdge", "edgeRun", "KindEdge", "edgeApplier"} {
		if _, ok := names[want]; !ok {
			t.Fatalf("the edge's files do not declare %s: %v", want, slices.Sorted(maps.Keys(names)))
		}
	}
	fset := token.NewFileSet()
	for _, file := range agentFiles {
		found, err := namesKinds(fset, file, nil, names)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			t.Errorf("%s: reach the kind through its hooks (hostKind.facts, hostKind.run, kindRun)", f)
		}
	}
	src := "package host\nfunc (a *Agent) x() { var g *edge = newEdge(\"\", \"\", nil); _ = spec.KindEdge; a.edge.take(g.name()) }\n"
	if found, err := namesKinds(fset, "named.go", src, names); err != nil || len(found) != 4 {
		t.Errorf("a source that names the edge four times is found naming it %d times (%v): %v", len(found), err, found)
	}
}

// TestEveryKindRunIsMade: an agent makes the kindRun of every kind that
// registers one, which kindOrder places (the order its steps go in), and
// of no other.
func TestEveryKindRunIsMade(t *testing.T) {
	t.Parallel()
	var want []string
	for name, k := range hostKinds {
		if k.run == nil {
			continue
		}
		if _, ok := kindOrders[name]; !ok {
			t.Errorf("kind %s registers a run but kindOrder does not place it: the agent would not make it", name)
		}
		want = append(want, name)
	}
	var made []string
	for _, r := range newKindRuns(kindHost{dir: t.TempDir(), node: "alpha"}) {
		made = append(made, r.kind)
	}
	slices.Sort(want)
	if slices.Sort(made); !slices.Equal(made, want) || !slices.Contains(made, spec.KindEdge) {
		t.Errorf("an agent makes the runs of %v, want %v (the edge's among them)", made, want)
	}
}
