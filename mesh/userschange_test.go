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

// TestEnrolWhileTheBusUsersChange: an enrolment that meets a change of the
// bus's users (another token created, another host joined, the sweep)
// still joins its node. When the bus reloaded its accounts at every change,
// its JetStream API answered "no responders" meanwhile, and an enrolment
// that took that for an answer failed after the token was spent and the
// node recorded, without its consumer: the host could not join, nor join
// again. The bus reloads nothing now; this holds that it stays so.
//
// Not parallel: its storm of changes takes both cores for seconds, and
// would slow the tests that wait on deadlines.
func TestEnrolWhileTheBusUsersChange(t *testing.T) {
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	// Enough users that each change costs something.
	for i := range 100 {
		joinWithKey(t, c, fmt.Sprintf("base%03d", i))
	}
	var stop atomic.Bool
	changes := make(chan int)
	go func() {
		n := 0
		for ; !stop.Load(); n++ {
			if _, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: fmt.Sprintf("storm%05d", n)}); err != nil {
				t.Errorf("token create during the storm: %v", err)
				break
			}
		}
		changes <- n
	}()
	var failed []error
	for i := range 30 {
		node := fmt.Sprintf("join%02d", i)
		res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: node})
		if err != nil {
			failed = append(failed, err)
			break
		}
		tok, _ := spec.ParseToken(res.Token)
		key, _ := nkeys.CreateUser()
		if _, err := c.enrolment.enrol(ctx, enrolRequestWith(t, tok, node, key)); err != nil {
			failed = append(failed, fmt.Errorf("enrol %s while the bus's users change: %w", node, err))
		}
	}
	stop.Store(true)
	n := <-changes
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
	}
}
