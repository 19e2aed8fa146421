package mesh

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// rollReadHeld is a store whose roll reads wait until their context ends.
type rollReadHeld struct {
	*store.DB
	entered chan struct{}
}

func (s *rollReadHeld) RollByID(ctx context.Context, _ int64) (store.Roll, error) {
	close(s.entered)
	<-ctx.Done()
	return store.Roll{}, fmt.Errorf("read roll: %w", ctx.Err())
}

// TestCallCutShortByTheStopIsNotAnswered: a call under way when the
// controller stops fails with the stop's cancellation; it is not answered
// with that failure, which its caller would take for the call's answer,
// and the caller hears nothing (and asks again).
func TestCallCutShortByTheStopIsNotAnswered(t *testing.T) {
	t.Parallel()
	held := &rollReadHeld{entered: make(chan struct{})}
	c, _ := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store { held.DB = db; return held })
	op := operatorConn(t, c)
	type answer struct {
		msg *nats.Msg
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		m, err := op.Request(spec.APISubject(spec.RollShow.Name), mustJSON(t, spec.ReleaseRollShowRequest{ID: 1}), 3*time.Second)
		answered <- answer{m, err}
	}()
	select {
	case <-held.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the roll show call did not reach the store")
	}
	stop, _ := controllerStops.Load(c)
	stop.(func())()
	a := <-answered
	if a.msg != nil {
		t.Fatalf("a call cut short by the stop was answered: %s", a.msg.Data)
	}
	if !errors.Is(a.err, nats.ErrTimeout) {
		t.Fatalf("the caller heard %v, want nothing (a timeout)", a.err)
	}
}
