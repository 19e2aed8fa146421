package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
		"mesh":     {"spec", "store", "broker", "ca", "release"},
		// A mesh binary read as a file: its target, whether it is mesh.
		"release": {},
		"host":    {"spec", "resolver", "ca", "release", "internal/safefile", "internal/retry"},
		// The state directory's own files: addrs.json, operator.creds,
		// config.yaml, .lock.
		"statedir": {"spec", "internal/safefile"},
		// The launcher: the wanted version of mesh run as a child, with a
		// fallback to the last good one.
		"launch": {"spec", "store", "statedir", "release", "resolver", "internal/safefile"},
		// A machine's parts, started in order and stopped in reverse.
		"daemon": {"spec", "store", "broker", "ca", "mesh", "host", "resolver", "statedir", "release", "internal/safefile", "internal/retry"},
		// The commands: flags, the operator's client, output.
		"cli": {"spec", "store", "broker", "ca", "mesh", "host", "resolver", "daemon", "statedir", "release", "launch", "internal/safefile", "internal/retry"},
		// The end-to-end tests: test files only, which run the built binary.
		"e2e": {},
		// The resolver alone, served for bench/dns.sh.
		"bench/meshdns": {"resolver"},
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
	}
	// inTests lists what a package's test files may import besides its row
	// of allowed, directly or not.
	inTests := map[string][]string{
		// The broker's tests serve TLS with the CA's certificates, as the
		// daemon does.
		"broker": {"ca"},
		// The host's tests stand in for the controller over a real bus.
		"host": {"broker"},
		// The end-to-end tests run the built binary, and read its store,
		// its certificates and its commands' output through the packages
		// that define them.
		"e2e": {"spec", "store", "broker", "ca", "mesh", "host", "resolver", "daemon", "statedir", "release", "launch", "cli", "internal/safefile", "internal/retry"},
	}
	// testSupport lists what every package's test files may import.
	testSupport := []string{"internal/dockertest", "internal/gobuild", "internal/poll", "internal/optin", "internal/testport"}
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

// TestDesignNamesRealTests: every test, fuzz target and benchmark that
// docs/design.md names as holding an invariant exists, so a renamed or
// deleted test cannot leave an invariant held by a name only.
func TestDesignNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz|Benchmark)[A-Z][A-Za-z0-9_]*)`").FindAllStringSubmatch(string(doc), -1)
	if len(named) < 20 {
		t.Fatalf("docs/design.md names %d tests; it should name the test of every invariant", len(named))
	}
	defined := map[string]bool{}
	err = filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
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
			t.Errorf("docs/design.md names %s, which no _test.go defines: name the test that holds it now", m[1])
		}
	}
}
