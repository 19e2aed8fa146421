package host_test

import (
	"os"
	"testing"
)

// rootOptIn asks for the tests that need root (a chown to another user, a
// tmpfs mount). CI sets it, so they run there and fail rather than skip if
// they cannot.
const rootOptIn = "MESH_TEST_ROOT"

// needRoot skips t where it cannot run and was not asked for; where it was
// asked for (MESH_TEST_ROOT=1) and cannot run, it fails.
func needRoot(t *testing.T, what string) {
	t.Helper()
	if os.Getuid() == 0 {
		return
	}
	if os.Getenv(rootOptIn) == "1" {
		t.Fatalf("%s needs root, and %s=1 asks for it: run the tests as root", what, rootOptIn)
	}
	t.Skipf("%s needs root (%s=1 makes this a failure)", what, rootOptIn)
}
