package host_test

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
)

// parallel is how many tests run at once unless -parallel says: the
// container tests mostly wait on the engine, and the trust test on
// update-ca-certificates, not on this process's CPU (go test's default is
// the number of CPUs, which runs them two at a time on a 2-core machine).
const parallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	code := m.Run()
	if err := removeSharedImage(); err != nil {
		fmt.Fprintln(os.Stderr, "remove the tests' image:", err)
		code = 1
	}
	os.Exit(code)
}
