package mesh

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/mesh-fleet/mesh/internal/gobuild"
)

// builds are the Go programs the tests build (a mesh release), each once
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

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
