package mesh

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// keptReplicas is how many servers keep stream once it is made or
// updated for want (zero is one): never fewer than keep it now, since a
// controller that has not yet learnt its cluster grew must not take
// copies away.
func keptReplicas(ctx context.Context, js jetstream.JetStream, stream string, want int) (int, error) {
	want = max(want, 1)
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return want, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read stream %s: %w", stream, err)
	}
	return max(s.CachedInfo().Config.Replicas, want), nil
}
