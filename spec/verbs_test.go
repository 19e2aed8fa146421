package spec_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestEveryVerbIsDescribed: every Verb this package declares (read from its
// source, so a new one cannot hide) is in spec.Verbs() once, with a timeout
// a caller can wait; and Verbs() lists nothing else.
func TestEveryVerbIsDescribed(t *testing.T) {
	declared := map[string]string{} // verb -> variable
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.CompositeLit)
					if !ok || !isVerbType(lit.Type) {
						continue
					}
					v, ok := verbName(lit)
					if !ok {
						t.Errorf("%s: its name is not a string literal", name.Name)
						continue
					}
					declared[v] = name.Name
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("no Verb found in the package's source")
	}
	seen := map[string]bool{}
	for _, v := range spec.Verbs() {
		if seen[v.Name] {
			t.Errorf("verb %q is listed twice", v.Name)
		}
		seen[v.Name] = true
		if _, ok := declared[v.Name]; !ok {
			t.Errorf("verb %q is listed but no Verb variable names it", v.Name)
		}
		if v.Timeout <= 0 {
			t.Errorf("verb %q has no timeout", v.Name)
		}
		if got, ok := spec.LookupVerb(v.Name); !ok || got != v {
			t.Errorf("LookupVerb(%q) = %+v %v", v.Name, got, ok)
		}
	}
	for v, name := range declared {
		if !seen[v] {
			t.Errorf("%s (%q) is not in spec.Verbs(): add it to verbs in verbs.go, with its timeout", name, v)
		}
	}
	if _, ok := spec.LookupVerb("no.such"); ok {
		t.Error("LookupVerb found a verb that does not exist")
	}
}

// isVerbType says whether a type expression is Verb[Req, Res].
func isVerbType(e ast.Expr) bool {
	x, ok := e.(*ast.IndexListExpr)
	if !ok {
		return false
	}
	id, ok := x.X.(*ast.Ident)
	return ok && id.Name == "Verb"
}

// verbName is the Name a Verb literal gives, by key or as its first field.
func verbName(lit *ast.CompositeLit) (string, bool) {
	for i, e := range lit.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); !ok || k.Name != "Name" {
				continue
			}
			e = kv.Value
		} else if i != 0 {
			continue
		}
		b, ok := e.(*ast.BasicLit)
		if !ok || b.Kind != token.STRING {
			return "", false
		}
		v, err := strconv.Unquote(b.Value)
		return v, err == nil
	}
	return "", false
}
