package mesh

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestJSCallAsksAgainOnlyWhileBusy: a JetStream API that cannot answer
// for now (no responders, a cluster without a meta leader) is asked
// again until it answers; any other error is the call's at once.
func TestJSCallAsksAgainOnlyWhileBusy(t *testing.T) {
	t.Parallel()
	other := &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use"}
	for _, tc := range []struct {
		name      string
		first     error
		wantCalls int
		wantErr   error
	}{
		{"no responders", nats.ErrNoResponders, 3, nil},
		{"cluster unavailable", fmt.Errorf("purge: %w", &jetstream.APIError{Code: 503, ErrorCode: jsClusterUnavailable}), 3, nil},
		{"another API error", other, 1, other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := jsCall(context.Background(), func(context.Context) error {
				calls++
				if calls < 3 {
					return tc.first
				}
				return nil
			})
			if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) {
				t.Fatalf("%d calls, %v; want %d calls, %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
