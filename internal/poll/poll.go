// Package poll is how tests wait for an event: a condition polled until it
// holds or a deadline passes, never a fixed sleep. It is test support only.
package poll

import (
	"testing"
	"time"
)

// Until calls cond until it returns nil, or fails t once within has
// passed, naming what was awaited and cond's last error. It polls at once,
// then after 10 ms, the wait doubling up to 200 ms: a condition met at once
// costs nothing, and one that takes seconds is not asked hundreds of times
// (an end-to-end test's condition often runs the mesh binary).
func Until(t testing.TB, within time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	wait := 10 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, within, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, 200*time.Millisecond)
	}
}
