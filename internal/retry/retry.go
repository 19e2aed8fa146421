// Package retry tries an operation again after a failure that is not an
// answer (a connection that failed on the way), waiting between tries, and
// never past its context: a cancelled context ends the wait at once and no
// further try is made.
package retry

import (
	"context"
	"errors"
	"time"
)

// Final marks err as an answer, not to be tried again: Do returns it (the
// error Final was given) at once.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return final{err}
}

type final struct{ err error }

func (f final) Error() string { return f.err.Error() }
func (f final) Unwrap() error { return f.err }

// Linear waits step after the first failure, twice step after the second,
// and so on.
func Linear(step time.Duration) func(try int) time.Duration {
	return func(try int) time.Duration { return time.Duration(try) * step }
}

// Do calls fn until it succeeds, fails with an error marked Final, or has
// been called attempts times, waiting backoff(n) after the nth failure. It
// returns fn's last error (unwrapped from Final), or ctx.Err() as soon as
// ctx ends: fn is not called once ctx has ended, and a wait is cut short.
func Do(ctx context.Context, attempts int, backoff func(try int) time.Duration, fn func() error) error {
	for try := 1; ; try++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := fn()
		if err == nil {
			return nil
		}
		var f final
		if errors.As(err, &f) {
			return f.err
		}
		if try >= attempts {
			return err
		}
		wait := time.NewTimer(backoff(try))
		select {
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		case <-wait.C:
		}
	}
}
