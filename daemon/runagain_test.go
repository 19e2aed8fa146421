package daemon

import (
	"context"
	"errors"
	"testing"
)

// TestRunAgainOnlyWhileRunning: a run whose peer set changed runs again,
// unless a stop was asked for meanwhile, which ends Run with no error;
// any other end is Run's.
func TestRunAgainOnlyWhileRunning(t *testing.T) {
	t.Parallel()
	running := context.Background()
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	other := errors.New("the store failed")
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		err   error
		again bool
		end   error
	}{
		{"peer set changed", running, ErrRestart, true, nil},
		{"peer set changed as it stopped", stopped, ErrRestart, false, nil},
		{"peer set changed, behind, as it stopped", stopped, errors.Join(ErrRestart, other), false, nil},
		{"another failure", running, other, false, other},
		{"another failure as it stopped", stopped, other, false, other},
		{"ended", stopped, nil, false, nil},
	} {
		again, end := runAgain(tc.ctx, tc.err)
		if again != tc.again || !errors.Is(end, tc.end) || (tc.end == nil && end != nil) {
			t.Errorf("%s: again %v, end %v; want %v, %v", tc.name, again, end, tc.again, tc.end)
		}
	}
}
