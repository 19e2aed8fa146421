package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestCLI runs the scripts in testdata/script against the built binary:
// the CLI's manners, its help, and its refusals of bad input.
func TestCLI(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", filepath.Dir(meshBin)+string(os.PathListSeparator)+env.Getenv("PATH"))
			env.Setenv("MESH_DIR", filepath.Join(env.WorkDir, "default-dir"))
			return nil
		},
	})
}
