package mesh

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
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
	var creates atomic.Int64
	var made atomic.Value
	made.Store("")
	sub, err := nc.Subscribe("$JS.API.CONSUMER.>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, ".CREATE.") {
			creates.Add(1)
			made.Store(m.Subject)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	c = restartController(t, c)
	nc.Flush()
	if n := creates.Load(); n != 0 {
		t.Fatalf("a start over %d nodes whose consumers are there asked to make %d consumers (the last %s), want none", len(nodes), n, made.Load())
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(context.Background(), spec.DeclarationStream, "gamma"); err != nil {
		t.Fatal(err)
	}
	restartController(t, c)
	nc.Flush()
	if n, s := creates.Load(), made.Load().(string); n != 1 || !strings.HasSuffix(s, ".gamma") {
		t.Fatalf("a start with gamma's consumer gone asked to make %d consumers (the last %s), want gamma's alone", n, s)
	}
}
