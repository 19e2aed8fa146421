package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the scripts run mesh: this test binary, run as mesh, is
// Main.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"mesh": func() { os.Exit(Main(os.Args, os.Stdout, os.Stderr)) },
	})
}

// selfDigest is the SHA-256 of this test binary, which the scripts run as
// mesh: read once for every script, not once each.
var selfDigest = sync.OnceValues(func() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	body, err := os.ReadFile(self)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:]), nil
})

// TestCLI runs the scripts in testdata/script against the command: the
// CLI's manners, its help, and its refusals of bad input.
func TestCLI(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(env *testscript.Env) error {
			env.Setenv("MESH_DIR", filepath.Join(env.WorkDir, "default-dir"))
			// What mesh version must say of the binary the scripts run.
			env.Setenv("GOVERSION", runtime.Version())
			env.Setenv("GOOS", runtime.GOOS)
			env.Setenv("GOARCH", runtime.GOARCH)
			env.Setenv("PROTOCOL", strconv.Itoa(spec.Protocol))
			self, err := os.Executable()
			if err != nil {
				return err
			}
			env.Setenv("MESHBIN", self)
			sum, err := selfDigest()
			if err != nil {
				return err
			}
			env.Setenv("MESHSHA256", sum)
			// A token that parses, for a mesh no bus serves.
			env.Setenv("TOKEN", spec.Token{Mesh: "home", ID: "t1", Node: "beta", Pin: "sha256:00", Bus: []string{"nats://127.0.0.1:9"},
				Secret: "SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4", Expires: time.Now().Add(time.Hour)}.Encode())
			// And one that joins a controller.
			env.Setenv("CTLTOKEN", spec.Token{Mesh: "home", ID: "t2", Node: "gamma", Pin: "sha256:00", Bus: []string{"nats://127.0.0.1:9"},
				Secret: "SUAIBDPBAUTWCWBKIO6XHQNINK5FWJW4OHLXC3HQ2KFE4PEJUA44CNHTC4", Expires: time.Now().Add(time.Hour), Controller: true}.Encode())
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// exits CODE PROG ARGS... runs PROG like exec and checks its exit
			// code: scripts rely on them (2: called wrongly, nothing done).
			"exits": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) < 2 {
					ts.Fatalf("usage: exits CODE PROG [ARGS...]")
				}
				want, err := strconv.Atoi(args[0])
				if err != nil {
					ts.Fatalf("exits: %q is not an exit code", args[0])
				}
				code := 0
				if err := ts.Exec(args[1], args[2:]...); err != nil {
					var ee *exec.ExitError
					if !errors.As(err, &ee) {
						ts.Fatalf("exits: %v", err)
					}
					code = ee.ExitCode()
				}
				if code != want {
					ts.Fatalf("%s exited %d, want %d", args[1], code, want)
				}
			},
		},
	})
}
