package launch_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/mesh-fleet/mesh/internal/gobuild"
)

// builds are the stand-in versions (testdata/child, one binary per
// behaviour) and the bare launcher (testdata/launcher), each built once
// per run.
var builds *gobuild.Builder

func TestMain(m *testing.M) {
	var err error
	if builds, err = gobuild.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	builds.Close()
	os.Exit(code)
}
