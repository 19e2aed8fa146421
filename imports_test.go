package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// goPackage is what go list -json says of a package's imports.
type goPackage struct {
	ImportPath   string
	Imports      []string // its own files' direct imports
	Deps         []string // everything its own files import, transitively
	TestImports  []string // its _test.go files' in the package
	XTestImports []string // its _test.go files' in package x_test
}

// importRules are docs/design.md's import directions. Packages are named
// relative to the module; an import outside it by its full path.
type importRules struct {
	// allowed: the project packages a package's own files may import,
	// directly or not.
	allowed map[string][]string
	// inTests: what a package's test files may import besides its row of
	// allowed, directly or not.
	inTests map[string][]string
	// testSupport: what every package's test files may import.
	testSupport []string
	// never: what a package's files, its test files too, never import
	// directly, whatever it reaches through another package.
	never map[string][]string
}

// listPackages runs go list -json over the module's packages.
func listPackages(t *testing.T) []goPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Deps,TestImports,XTestImports", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p goPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return pkgs
		} else if err != nil {
			t.Fatalf("go list's output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
}

// importViolations names every import of pkgs that r does not allow: the
// module's main package may import everything, every other package needs
// a row of r.allowed. A package's test files are held to its row, to
// r.inTests and to r.testSupport, through what they import in turn.
func importViolations(mod string, pkgs []goPackage, r importRules) []string {
	rel := func(path string) (string, bool) {
		name, ok := strings.CutPrefix(path, mod+"/")
		return name, ok
	}
	byPath := map[string]goPackage{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var bad []string
	for _, p := range pkgs {
		if p.ImportPath == mod {
			continue
		}
		pkg, _ := rel(p.ImportPath)
		own, known := r.allowed[pkg]
		if !known {
			bad = append(bad, fmt.Sprintf("package %s has no import rule: add it to docs/design.md and this test", pkg))
			continue
		}
		for _, dep := range p.Deps {
			if d, ok := rel(dep); ok && !slices.Contains(own, d) {
				bad = append(bad, fmt.Sprintf("%s imports %s: docs/design.md does not allow it", pkg, d))
			}
		}
		inTests := slices.Concat(own, r.inTests[pkg], r.testSupport)
		reached := map[string]bool{}
		for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
			if imp == p.ImportPath {
				continue // package x_test imports x
			}
			for _, dep := range append([]string{imp}, byPath[imp].Deps...) {
				if d, ok := rel(dep); ok && !reached[d] {
					reached[d] = true
					if !slices.Contains(inTests, d) {
						bad = append(bad, fmt.Sprintf("%s's tests import %s: docs/design.md does not allow it", pkg, d))
					}
				}
			}
		}
		for _, imp := range slices.Concat(p.Imports, p.TestImports, p.XTestImports) {
			name, ok := rel(imp)
			if !ok {
				name = imp
			}
			for _, n := range r.never[pkg] {
				if name == n || strings.HasPrefix(name, n+"/") {
					bad = append(bad, fmt.Sprintf("%s imports %s, or its tests do: docs/design.md says never", pkg, name))
				}
			}
		}
	}
	slices.Sort(bad)
	return slices.Compact(bad)
}

// TestImportViolationsSeeTestFiles: the check fails for what a package's
// test files import, directly or through another package, and for a
// direct import its rules say never, not only for its own files' imports.
func TestImportViolationsSeeTestFiles(t *testing.T) {
	const mod = "example.com/m"
	rules := importRules{
		allowed: map[string][]string{
			"spec": {}, "store": {"spec"}, "host": {"spec"}, "mesh": {"spec", "store"},
			"cli": {"spec", "store", "mesh"}, "e2e": {}, "internal/poll": {},
		},
		inTests:     map[string][]string{"e2e": {"cli", "mesh", "store", "spec"}},
		testSupport: []string{"internal/poll"},
		never:       map[string][]string{"cli": {"store", "modernc.org/sqlite"}, "host": {"mesh"}},
	}
	base := []goPackage{
		{ImportPath: mod},
		{ImportPath: mod + "/spec"},
		{ImportPath: mod + "/internal/poll"},
		{ImportPath: mod + "/store", Imports: []string{mod + "/spec", "modernc.org/sqlite"}, Deps: []string{mod + "/spec", "modernc.org/sqlite"}},
		{ImportPath: mod + "/mesh", Imports: []string{mod + "/store"}, Deps: []string{mod + "/spec", mod + "/store"}},
		{ImportPath: mod + "/host", Imports: []string{mod + "/spec"}, Deps: []string{mod + "/spec"},
			XTestImports: []string{mod + "/host", mod + "/internal/poll", "testing"}},
		{ImportPath: mod + "/cli", Imports: []string{mod + "/mesh"}, Deps: []string{mod + "/mesh", mod + "/spec", mod + "/store"}},
		{ImportPath: mod + "/e2e", XTestImports: []string{mod + "/cli", mod + "/internal/poll"}},
	}
	if bad := importViolations(mod, base, rules); len(bad) > 0 {
		t.Fatalf("the allowed imports were refused: %q", bad)
	}
	for _, c := range []struct {
		name, pkg string
		change    func(*goPackage)
		want      string
	}{
		{"a host test imports mesh", "host", func(p *goPackage) { p.XTestImports = append(p.XTestImports, mod+"/mesh") },
			"host's tests import mesh: docs/design.md does not allow it"},
		{"a host test imports mesh, which host never does", "host", func(p *goPackage) { p.TestImports = append(p.TestImports, mod+"/mesh") },
			"host imports mesh, or its tests do: docs/design.md says never"},
		{"a host test reaches store through mesh", "host", func(p *goPackage) { p.XTestImports = append(p.XTestImports, mod+"/mesh") },
			"host's tests import store: docs/design.md does not allow it"},
		{"an e2e test imports host", "e2e", func(p *goPackage) { p.XTestImports = append(p.XTestImports, mod+"/host") },
			"e2e's tests import host: docs/design.md does not allow it"},
		{"a cli test opens SQLite", "cli", func(p *goPackage) { p.TestImports = append(p.TestImports, "modernc.org/sqlite") },
			"cli imports modernc.org/sqlite, or its tests do: docs/design.md says never"},
		{"cli imports store, which its row allows through mesh", "cli", func(p *goPackage) { p.Imports = append(p.Imports, mod+"/store") },
			"cli imports store, or its tests do: docs/design.md says never"},
		{"a package without a row", "spec", func(p *goPackage) { p.ImportPath = mod + "/nowhere" },
			"package nowhere has no import rule: add it to docs/design.md and this test"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pkgs := slices.Clone(base)
			for i := range pkgs {
				if pkgs[i].ImportPath == mod+"/"+c.pkg {
					p := pkgs[i]
					p.Imports, p.TestImports, p.XTestImports = slices.Clone(p.Imports), slices.Clone(p.TestImports), slices.Clone(p.XTestImports)
					c.change(&p)
					pkgs[i] = p
				}
			}
			if bad := importViolations(mod, pkgs, rules); !slices.Contains(bad, c.want) {
				t.Fatalf("violations %q, want among them %q", bad, c.want)
			}
		})
	}
}
