package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestImportDirections holds the import rules of docs/design.md: each
// package, and its test files, import only the project packages its row
// allows, and never what the design says a package never imports.
func TestImportDirections(t *testing.T) {
	const mod = "github.com/mesh-fleet/mesh"
	// allowed lists, for each package, the project packages its own files
	// may import, directly or not.
	allowed := map[string][]string{
		"spec":     {},
		"store":    {"spec"},
		"broker":   {},
		"resolver": {},
		"ca":       {},
		// Secret values sealed: at rest, in transit to one node.
		"seal": {},
		// A leader lease on a JetStream KV key, and its fenced writes.
		"lease": {},
		// The store's truth as a log on the bus, the store a view of it.
		"journal": {"spec", "store", "lease"},
		"mesh":    {"spec", "store", "broker", "ca", "release", "seal", "web"},
		// The status page: rendered from a view the controller gives it.
		"web": {"spec"},
		// A mesh binary read as a file: its target, whether it is mesh.
		"release": {},
		"host":    {"spec", "resolver", "ca", "release", "seal", "overlay", "internal/safefile", "internal/retry"},
		// The overlay's WireGuard interface and the choice of its paths.
		"overlay": {"spec"},
		// The state directory's own files: addrs.json, operator.creds,
		// config.yaml, .lock.
		"statedir": {"spec", "internal/safefile"},
		// The launcher: the wanted version of mesh run as a child, with a
		// fallback to the last good one.
		"launch": {"spec", "store", "statedir", "release", "resolver", "internal/safefile"},
		// A machine's parts, started in order and stopped in reverse.
		"daemon": {"spec", "store", "broker", "ca", "mesh", "journal", "lease", "host", "resolver", "statedir", "release", "seal", "overlay", "web", "internal/safefile", "internal/retry"},
		// The commands: flags, the operator's client, output.
		"cli": {"spec", "store", "broker", "ca", "mesh", "journal", "lease", "host", "resolver", "daemon", "statedir", "release", "launch", "seal", "overlay", "web", "internal/safefile", "internal/retry"},
		// The end-to-end tests: test files only, which run the built binary.
		"e2e": {},
		// The resolver alone, served for bench/dns.sh.
		"bench/meshdns": {"resolver"},
		// The edge's load generator, backend and probe, for bench/edge.sh.
		"bench/edgeload": {},
		// The examples' TLS server and verifying fetcher (meshtls), built
		// into their images: the standard library and atomic writes.
		"examples/meshtls": {"internal/safefile"},
		// Test support: Docker images built FROM scratch with busybox.
		"internal/dockertest": {},
		// Atomic file writes, for the host and the state directory.
		"internal/safefile": {},
		// A retry that honours its context, for the CLI's dial and the join.
		"internal/retry": {},
		// Test support: Go programs built for a target, once per run.
		"internal/gobuild": {},
		// Test support: waiting for a condition with a deadline.
		"internal/poll": {},
		// Test support: the switch for the tests that take minutes.
		"internal/optin": {},
		// Test support: listening ports outside the ephemeral range,
		// held across a daemon's stop and restart.
		"internal/testport": {},
		// Test support: Pebble, a real ACME server, and its DNS, built
		// from the module's tools once per run.
		"internal/pebbletest": {"internal/poll", "internal/testport"},
	}
	// inTests lists what a package's test files may import besides its row
	// of allowed, directly or not.
	inTests := map[string][]string{
		// The broker's tests serve TLS with the CA's certificates, as the
		// daemon does.
		"broker": {"ca"},
		// The host's tests stand in for the controller over a real bus.
		"host": {"broker"},
		// The lease's tests campaign on real buses, clustered.
		"lease": {"broker", "ca"},
		// The journal's tests run on a real bus.
		"journal": {"broker", "ca"},
		// The end-to-end tests run the built binary, and read its store,
		// its certificates and its commands' output through the packages
		// that define them.
		"e2e": {"spec", "store", "broker", "ca", "mesh", "journal", "lease", "host", "resolver", "daemon", "statedir", "release", "launch", "cli", "seal", "overlay", "web", "internal/safefile", "internal/retry"},
	}
	// testSupport lists what every package's test files may import.
	testSupport := []string{"internal/dockertest", "internal/gobuild", "internal/poll", "internal/optin", "internal/testport", "internal/pebbletest"}
	// never lists, for a package, what neither its files nor its test
	// files import directly, whatever they reach through another package.
	never := map[string][]string{
		// The CLI never opens SQLite: the controller's store is the daemon's.
		"cli":  {"store", "modernc.org/sqlite"},
		"mesh": {"host"},
		"host": {"mesh"},
	}
	pkgs := listPackages(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[strings.TrimPrefix(p.ImportPath, mod+"/")] = true
	}
	if !seen["spec"] || !seen["mesh"] || !seen["host"] {
		t.Fatalf("go list did not list the project's packages: %v", seen)
	}
	rules := importRules{allowed: allowed, inTests: inTests, testSupport: testSupport, never: never}
	for _, v := range importViolations(mod, pkgs, rules) {
		t.Error(v)
	}
	// spec is the standard library only.
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./spec").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if got := strings.TrimSpace(string(out)); got != mod+"/spec" {
		t.Errorf("spec depends on more than the standard library:\n%s", got)
	}
}

// TestPackagesSayWhatTheyAre: every package has a doc comment, the first
// thing a newcomer reads of it (docs/design.md's package map points there).
func TestPackagesSayWhatTheyAre(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Doc}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, doc, _ := strings.Cut(line, "\t")
		if strings.TrimSpace(doc) == "" {
			t.Errorf("package %s has no doc comment: say what it is for above its package clause (a doc.go if no file is the obvious home)", pkg)
		}
	}
}

// designDocs are the design's two halves: the map and the invariants, and
// the decisions taken.
var designDocs = []string{"docs/design.md", "docs/decisions.md"}

// TestDesignNamesRealTests: every test, fuzz target and benchmark that
// the design names as holding an invariant or a decision exists, so a
// renamed or deleted test cannot leave either held by a name only.
func TestDesignNamesRealTests(t *testing.T) {
	var named [][]string
	for _, p := range designDocs {
		doc, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		found := regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)`").FindAllStringSubmatch(string(doc), -1)
		if len(found) < 20 {
			t.Fatalf("%s names %d tests; it should name the test of every invariant and decision", p, len(found))
		}
		for _, m := range found {
			named = append(named, append(m, p))
		}
	}
	defined := map[string]bool{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark)\w+)\(`).FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range named {
		if !defined[m[1]] {
			t.Errorf("%s names %s, which no _test.go defines: name the test that holds it now", m[2], m[1])
		}
	}
}

// TestImportArrowsMatchTheRules: the arrows of docs/design.md's "Which way
// imports point" block are the allowed table of TestImportDirections, so
// neither names a package or an import the other does not.
func TestImportArrowsMatchTheRules(t *testing.T) {
	doc, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	arrows, err := importArrows(string(doc))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := allowedImports("design_test.go")
	if err != nil {
		t.Fatal(err)
	}
	delete(arrows, "main") // TestImportDirections lets main import anything
	for _, pkg := range sortedKeys(rules) {
		got, ok := arrows[pkg]
		if !ok {
			t.Errorf("%s has an import rule but no row in docs/design.md's import arrows", pkg)
			continue
		}
		for _, dep := range sortedKeys(rules[pkg]) {
			if !got[dep] {
				t.Errorf("%s may import %s, which docs/design.md's arrows leave out", pkg, dep)
			}
		}
		for _, dep := range sortedKeys(got) {
			if !rules[pkg][dep] {
				t.Errorf("docs/design.md's arrows let %s import %s, which TestImportDirections does not allow", pkg, dep)
			}
		}
	}
	for _, pkg := range sortedKeys(arrows) {
		if _, ok := rules[pkg]; !ok {
			t.Errorf("docs/design.md's import arrows have a row for %s, which TestImportDirections has no rule for", pkg)
		}
	}
}

// importArrows reads the block under "### Which way imports point": each
// row is "pkg, pkg -> dep, dep", continued on lines without an arrow;
// "nothing" is no project package, and a parenthesis is a comment.
func importArrows(doc string) (map[string]map[string]bool, error) {
	_, rest, ok := strings.Cut(doc, "### Which way imports point")
	if !ok {
		return nil, errors.New("docs/design.md has no \"Which way imports point\" section")
	}
	_, rest, ok = strings.Cut(rest, "```\n")
	if !ok {
		return nil, errors.New("the import arrows are not in a ``` block")
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		return nil, errors.New("the import arrows' block does not end")
	}
	comment := regexp.MustCompile(`\([^)]*\)`)
	name := regexp.MustCompile(`^[a-z][a-z0-9]*(/[a-z][a-z0-9]*)*$`)
	arrows := map[string]map[string]bool{}
	var row []string
	for _, line := range strings.Split(block, "\n") {
		line = strings.TrimSpace(comment.ReplaceAllString(line, ""))
		if line == "" {
			continue
		}
		left, right, isRow := strings.Cut(line, "->")
		if isRow {
			row = nil
			for _, pkg := range strings.Split(left, ",") {
				pkg = strings.TrimSpace(pkg)
				if !name.MatchString(pkg) {
					return nil, fmt.Errorf("import arrows: %q is not a package", pkg)
				}
				if _, dup := arrows[pkg]; dup {
					return nil, fmt.Errorf("import arrows: %s has two rows", pkg)
				}
				arrows[pkg] = map[string]bool{}
				row = append(row, pkg)
			}
		} else if row == nil {
			return nil, fmt.Errorf("import arrows: %q continues no row", line)
		} else {
			right = line
		}
		for _, dep := range strings.Split(right, ",") {
			dep = strings.TrimSpace(dep)
			if dep == "" || dep == "nothing" {
				continue
			}
			if !name.MatchString(dep) {
				return nil, fmt.Errorf("import arrows: %q is not a package", dep)
			}
			for _, pkg := range row {
				arrows[pkg][dep] = true
			}
		}
	}
	return arrows, nil
}

// allowedImports reads the allowed table from TestImportDirections's
// source, so that test stays the one place the rules are written.
func allowedImports(file string) (map[string]map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("read the import rules: %w", err)
	}
	var table *ast.CompositeLit
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "TestImportDirections" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok || table != nil || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
				return true
			}
			if id, ok := as.Lhs[0].(*ast.Ident); ok && id.Name == "allowed" {
				table, _ = as.Rhs[0].(*ast.CompositeLit)
			}
			return true
		})
	}
	if table == nil {
		return nil, errors.New("read the import rules: TestImportDirections has no allowed := map literal")
	}
	rules := map[string]map[string]bool{}
	for _, e := range table.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			return nil, errors.New("read the import rules: an entry of allowed is not key: value")
		}
		pkg, err := stringLit(kv.Key)
		if err != nil {
			return nil, err
		}
		deps, ok := kv.Value.(*ast.CompositeLit)
		if !ok {
			return nil, fmt.Errorf("read the import rules: %s's value is not a list", pkg)
		}
		rules[pkg] = map[string]bool{}
		for _, d := range deps.Elts {
			dep, err := stringLit(d)
			if err != nil {
				return nil, err
			}
			rules[pkg][dep] = true
		}
	}
	return rules, nil
}

// stringLit is the value of a string literal.
func stringLit(e ast.Expr) (string, error) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", fmt.Errorf("read the import rules: %T is not a string literal", e)
	}
	return strconv.Unquote(lit.Value)
}

// sortedKeys is m's keys in order, so failures read the same each run.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
