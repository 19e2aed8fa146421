package cli

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

// TestEveryVerbHasACaller: every verb spec lists is called by some command:
// this package's source (read, so a verb cannot hide) names the verb's
// variable. A verb the controller serves and no command calls is a verb an
// operator cannot use.
func TestEveryVerbHasACaller(t *testing.T) {
	vars := verbVars(t, filepath.Join("..", "spec")) // verb -> variable
	named := specNames(t, ".")
	for _, v := range spec.Verbs() {
		name, ok := vars[v.Name]
		switch {
		case !ok:
			t.Errorf("verb %q: no Verb variable in spec/verbs.go names it", v.Name)
		case !named[name]:
			t.Errorf("verb %q: no command calls spec.%s: add its command in cli/<noun>.go", v.Name, name)
		}
	}
}

// goFiles parses the package in dir, leaving out its tests.
func goFiles(t *testing.T, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, path := range paths {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// verbVars is, by verb name, the variable in the spec package's source
// that declares it: var X = Verb[Req, Res]{Name, Timeout}.
func verbVars(t *testing.T, dir string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, f := range goFiles(t, dir) {
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
					if !ok {
						continue
					}
					if !isVerbType(lit.Type) || len(lit.Elts) == 0 {
						continue
					}
					first := lit.Elts[0]
					if kv, ok := first.(*ast.KeyValueExpr); ok {
						first = kv.Value
					}
					if b, ok := first.(*ast.BasicLit); ok && b.Kind == token.STRING {
						v, _ := strconv.Unquote(b.Value)
						vars[v] = name.Name
					}
				}
			}
		}
	}
	if len(vars) == 0 {
		t.Fatalf("no Verb variable found in %s", dir)
	}
	return vars
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

// specNames is every name the package in dir uses from the spec package.
func specNames(t *testing.T, dir string) map[string]bool {
	t.Helper()
	named := map[string]bool{}
	for _, f := range goFiles(t, dir) {
		local := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/mesh-fleet/mesh/spec" {
				local = "spec"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
					named[sel.Sel.Name] = true
				}
			}
			return true
		})
	}
	return named
}
