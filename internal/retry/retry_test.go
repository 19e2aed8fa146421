package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/retry"
)

var errBusy = errors.New("connection closed")

func TestDo(t *testing.T) {
	none := func(int) time.Duration { return 0 }
	for _, c := range []struct {
		name     string
		attempts int
		results  []error // fn's answer at each call; past the end, errBusy
		want     error
		calls    int
	}{
		{"first try", 4, []error{nil}, nil, 1},
		{"after two failures", 4, []error{errBusy, errBusy, nil}, nil, 3},
		{"out of attempts", 3, nil, errBusy, 3},
		{"an answer is final", 4, []error{errBusy, retry.Final(errBusy)}, errBusy, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := retry.Do(context.Background(), c.attempts, none, func() error {
				calls++
				if calls <= len(c.results) {
					return c.results[calls-1]
				}
				return errBusy
			})
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) || calls != c.calls {
				t.Fatalf("Do = %v after %d calls, want %v after %d", err, calls, c.want, c.calls)
			}
			var f interface{ Unwrap() error }
			if errors.As(err, &f) {
				t.Fatalf("Do returned the Final wrapper %T, want the error it carries", err)
			}
		})
	}
}

// A context cancelled while Do waits ends the wait: Do returns ctx.Err()
// and fn is not called again (a Do that slept through the cancellation
// would call it four more times).
func TestDoHonoursItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	done := make(chan error, 1)
	go func() {
		done <- retry.Do(ctx, 5, retry.Linear(time.Millisecond), func() error {
			calls++
			cancel()
			return errBusy
		})
	}()
	err := <-done
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("Do = %v after %d calls, want context.Canceled after 1", err, calls)
	}

	// Cancelled before the first try: fn is never called.
	calls = 0
	if err := retry.Do(ctx, 5, retry.Linear(time.Millisecond), func() error { calls++; return nil }); !errors.Is(err, context.Canceled) || calls != 0 {
		t.Fatalf("Do on a cancelled context = %v after %d calls, want context.Canceled and no call", err, calls)
	}
}
