package poll_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	poll.Until(t, time.Minute, "the third call", func() error {
		calls++
		if calls == 3 {
			return nil
		}
		return fmt.Errorf("call %d", calls)
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

// fatalT records a failure instead of ending the test.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func TestUntilFailsNamingWhatAndWhy(t *testing.T) {
	f := &fatalT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(f) {
				panic(r)
			}
		}()
		poll.Until(f, 0, "the flag set", func() error { return errors.New("still unset") })
	}()
	if !strings.Contains(f.msg, "the flag set: not within 0s: still unset") {
		t.Fatalf("failure said %q", f.msg)
	}
}
