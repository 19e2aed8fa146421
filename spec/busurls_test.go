package spec_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mesh-fleet/mesh/spec"
)

// TestCheckControllers: a list of a few nats:// or tls:// URLs of a host
// and a port passes; none, too many, and any URL of another form, too
// long or carrying more than a host and a port are refused.
func TestCheckControllers(t *testing.T) {
	t.Parallel()
	for _, ok := range [][]string{
		{"nats://192.0.2.1:4222"},
		{"nats://192.0.2.1:4222", "tls://mesh.example.org:4222", "nats://[2001:db8::1]:4222"},
	} {
		if err := spec.CheckControllers(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	many := make([]string, spec.MaxControllers+1)
	for i := range many {
		many[i] = fmt.Sprintf("nats://192.0.2.%d:4222", i+1)
	}
	for _, bad := range [][]string{
		nil,
		{},
		many,
		{""},
		{"nats://192.0.2.1:4222", ""},
		{"http://192.0.2.1:4222"},
		{"ws://192.0.2.1:4222"},
		{"192.0.2.1:4222"},
		{"nats://192.0.2.1"},
		{"nats://:4222"},
		{"nats://192.0.2.1:0"},
		{"nats://192.0.2.1:65536"},
		{"nats://192.0.2.1:port"},
		{"nats://user:pass@192.0.2.1:4222"},
		{"nats://192.0.2.1:4222/path"},
		{"nats://192.0.2.1:4222/"},
		{"nats://192.0.2.1:4222?q=1"},
		{"nats://192.0.2.1:4222#f"},
		{"nats:192.0.2.1:4222"},
		{"nats://a b:4222"},
		{"nats://" + strings.Repeat("a", spec.MaxBusURL) + ":4222"},
	} {
		if err := spec.CheckControllers(bad); err == nil {
			t.Errorf("%q passes", bad)
		}
	}
}

// FuzzCheckControllers: a list that passes is within its bounds: at most
// MaxControllers URLs, each of at most MaxBusURL bytes, nats:// or tls://.
func FuzzCheckControllers(f *testing.F) {
	for _, seed := range []string{
		"nats://192.0.2.1:4222",
		"nats://192.0.2.1:4222 tls://h:1",
		"nats://u@h:1",
		"nats://h:1/x",
		"",
		" ",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		urls := strings.Split(s, " ")
		if spec.CheckControllers(urls) != nil {
			return
		}
		if len(urls) == 0 || len(urls) > spec.MaxControllers {
			t.Fatalf("%q passes with %d URLs", s, len(urls))
		}
		for _, u := range urls {
			if len(u) > spec.MaxBusURL || !(strings.HasPrefix(u, "nats://") || strings.HasPrefix(u, "tls://")) {
				t.Fatalf("%q passes", u)
			}
		}
	})
}
