// Package optin holds the switch for the tests that take minutes of real
// time: a certificate's life and renewal, building and rolling real mesh
// binaries through launchers, floods, 100 MiB transfers. A plain go test
// leaves them out so that make test stays a quick check; CI sets
// MESH_TEST_SLOW=1 and runs every one of them. It holds too the switch
// for the tests that drive a real browser (MESH_TEST_BROWSER).
package optin

import (
	"os"
	"testing"
)

// Slow is the environment variable that asks for the slow tests: "1" runs
// them, anything else skips them, naming the variable.
const Slow = "MESH_TEST_SLOW"

// NeedSlow skips t unless MESH_TEST_SLOW=1. why says what makes it slow.
func NeedSlow(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(Slow) != "1" {
		t.Skipf("slow (%s): %s=1 runs it, as CI does", why, Slow)
	}
}

// Browser is the environment variable that asks for the tests that drive
// a real browser (Debian's chromium, headless): "1" runs them, anything
// else skips them, naming the variable.
const Browser = "MESH_TEST_BROWSER"

// NeedBrowser skips t unless MESH_TEST_BROWSER=1.
func NeedBrowser(t testing.TB) {
	t.Helper()
	if os.Getenv(Browser) != "1" {
		t.Skipf("drives a real browser (chromium): %s=1 runs it, as CI does", Browser)
	}
}
