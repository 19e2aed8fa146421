// Package optin holds the switch for the tests that take minutes of real
// time: a certificate's life and renewal, building and rolling real mesh
// binaries through launchers, floods, 100 MiB transfers. A plain go test
// leaves them out so that make test stays a quick check; CI sets
// MESH_TEST_SLOW=1 and runs every one of them.
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
