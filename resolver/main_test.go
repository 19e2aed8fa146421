package resolver

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// parallel is how many tests run at once unless -parallel says: most wait
// on a TTL, an upstream's timeout or a socket, not on the CPU (go test's
// default is the number of CPUs, two on a 2-core machine).
const parallel = 8

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	os.Exit(m.Run())
}
