package mesh

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nkeys"
)

// TestEnrolWhileTheBusReloads: an enrolment that meets a reload of the
// bus's users (another token created, another host joined, the sweep)
// still joins its node. While nats-server reloads its accounts its
// JetStream API answers "no responders", and an enrolment that took that
// for an answer failed after the token was spent and the node recorded,
// without its consumer: the host could not join, nor join again.
//
// Not parallel: its storm of reloads takes both cores for some 20 s, and
// would slow the tests that wait on deadlines.
func TestEnrolWhileTheBusReloads(t *testing.T) {
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	// Enough users that each reload takes a while.
	for i := range 100 {
		joinWithKey(t, c, fmt.Sprintf("base%03d", i))
	}
	var stop atomic.Bool
	reloads := make(chan int)
	go func() {
		n := 0
		for ; !stop.Load(); n++ {
			if _, err := c.createToken(ctx, spec.TokenCreateRequest{Node: fmt.Sprintf("storm%05d", n)}); err != nil {
				t.Errorf("token create during the storm: %v", err)
				break
			}
		}
		reloads <- n
	}()
	var failed []error
	for i := range 30 {
		node := fmt.Sprintf("join%02d", i)
		res, err := c.createToken(ctx, spec.TokenCreateRequest{Node: node})
		if err != nil {
			failed = append(failed, err)
			break
		}
		tok, _ := spec.ParseToken(res.Token)
		key, _ := nkeys.CreateUser()
		if _, err := c.enrol(ctx, enrolRequestWith(t, tok, node, key)); err != nil {
			failed = append(failed, fmt.Errorf("enrol %s while the bus reloads: %w", node, err))
		}
	}
	stop.Store(true)
	n := <-reloads
	if len(failed) > 0 {
		t.Fatalf("%d of 30 enrolments failed; the first: %v", len(failed), failed[0])
	}
	if n < 10 {
		t.Fatalf("only %d tokens were created during the joins: the test proves nothing", n)
	}
	for i := range 30 {
		node := fmt.Sprintf("join%02d", i)
		if _, err := db.Node(ctx, node); err != nil {
			t.Error(err)
		}
		if _, err := c.js.PushConsumer(ctx, spec.DeclarationStream, node); err != nil {
			t.Errorf("%s joined without its consumer: %v", node, err)
		}
	}
}
