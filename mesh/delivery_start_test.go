package mesh

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStartMakesOnlyTheConsumersMissing: a controller that starts over
// nodes whose consumers the stream holds as it makes them asks the bus to
// make none (one listing, not a call a node); one consumer gone is made
// again, alone.
func TestStartMakesOnlyTheConsumersMissing(t *testing.T) {
	t.Parallel()
	c, _ := newController(t, &clock{now: time.Now()})
	nodes := []string{"beta", "gamma", "delta", "epsilon", "zeta"}
	for _, n := range nodes {
		joinNode(t, c, n)
	}
	nc := operatorConn(t, c)
	// A synchronous subscription: once a flush returns, every request the
	// bus routed before it is in the subscription's queue.
	sub, err := nc.SubscribeSync("$JS.API.CONSUMER.>")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	creates := func() []string {
		t.Helper()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		var made []string
		for {
			m, err := sub.NextMsg(0)
			if err != nil {
				return made
			}
			if strings.Contains(m.Subject, ".CREATE.") {
				made = append(made, m.Subject)
			}
		}
	}

	c = restartController(t, c)
	if made := creates(); len(made) != 0 {
		t.Fatalf("a start over %d nodes whose consumers are there asked to make %d consumers (%v), want none", len(nodes), len(made), made)
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(context.Background(), spec.DeclarationStream, "gamma"); err != nil {
		t.Fatal(err)
	}
	restartController(t, c)
	if made := creates(); len(made) != 1 || !strings.HasSuffix(made[0], ".gamma") {
		t.Fatalf("a start with gamma's consumer gone asked to make %v, want gamma's alone", made)
	}
}
