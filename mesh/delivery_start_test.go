package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestStartMakesOnlyTheConsumersMissing: a controller that starts over
// nodes whose consumers the stream holds as it makes them (their hosts of
// protocol 5, which have one) asks the bus to make none (one listing, not
// a call a node); one consumer gone is made again, alone.
func TestStartMakesOnlyTheConsumersMissing(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	nodes := []string{"beta", "gamma", "delta", "epsilon", "zeta"}
	var beats []spec.Heartbeat
	for _, n := range nodes {
		joinNode(t, c, n)
		beats = append(beats, spec.Heartbeat{Node: n, Time: time.Now(), Protocol: spec.ProtocolRosterPublished})
	}
	if _, err := db.RecordHeartbeats(context.Background(), beats, time.Now()); err != nil {
		t.Fatal(err)
	}
	c = restartController(t, c)
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

// TestConsumerMadeAgainDeliversOnlyTheLast: a node's consumer keeps its
// state in memory, so the bus's restart (the controller's) loses it; the
// controller's start makes it again, and it then delivers the node's last
// declaration (and, to a host of protocol 4, the last roster message; a
// newer host's consumer filters no roster), not the few the stream keeps
// before them (which a host would refuse as older than its own).
func TestConsumerMadeAgainDeliversOnlyTheLast(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	joinNode(t, c, "beta")
	ctx := context.Background()
	for i := range 3 {
		mod := spec.Module{Name: "m", Version: fmt.Sprint(i), Routes: []spec.Route{{Name: fmt.Sprintf("r%d", i), Port: 80}}, Resources: []spec.Resource{resource(fmt.Sprintf("/srv/%d", i))}}
		mod.Resources[0].Module, mod.Resources[0].Name = "m", spec.ResourceName("m", spec.KindDirectory, mod.Resources[0].Target())
		if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := db.Assign(ctx, "m", "beta", nil, clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.push(ctx, spec.PushRequest{Nodes: []string{"beta"}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := onSubject(t, c, spec.DeclarationSubject("beta")); n != 3 {
		t.Fatalf("%d declarations of beta on the stream, want 3", n)
	}
	js, err := jetstream.New(c.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PushConsumer(ctx, spec.DeclarationStream, "beta"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("beta joined and was made a consumer (%v): a host of protocol %d has none, and an older one is made one when it says so", err, spec.Protocol)
	}
	lastDecl, err := db.LastDeclaration(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	lastRoster, err := db.LastRoster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A host of protocol 4 takes the roster messages from its consumer; one
	// of protocol 5 from the stream's republish, its consumer filtering its
	// own declarations alone.
	for _, host := range []struct {
		protocol int
		rosters  []uint64
	}{{spec.ProtocolRosterDelta, []uint64{lastRoster.Seq}}, {spec.ProtocolRosterPublished, nil}} {
		// What a restart of the bus leaves: no consumer.
		if err := js.DeleteConsumer(ctx, spec.DeclarationStream, "beta"); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatal(err)
		}
		got := make(chan *nats.Msg, 32)
		sub, err := c.nc.ChanSubscribe(spec.DeliverySubject("beta"), got)
		if err != nil {
			t.Fatal(err)
		}
		// What the controller's start then does.
		if made, err := ensureConsumers(ctx, c.js, []store.Node{{Name: "beta", Protocol: host.protocol}}); err != nil || made["beta"] != host.protocol {
			t.Fatalf("protocol %d: made %v, %v", host.protocol, made, err)
		}
		if cons, err := js.PushConsumer(ctx, spec.DeclarationStream, "beta"); err != nil || !cons.CachedInfo().Config.MemoryStorage {
			t.Fatalf("protocol %d: beta's consumer is not in memory (%v)", host.protocol, err)
		}
		var decls, rosters []uint64
		deadline := time.After(10 * time.Second)
		for len(decls)+len(rosters) < 1+len(host.rosters) {
			select {
			case m := <-got:
				var claim struct {
					Seq   uint64 `json:"seq"`
					Delta uint64 `json:"delta_seq"`
				}
				json.Unmarshal(m.Data, &claim)
				if m.Subject == spec.RosterSubject {
					rosters = append(rosters, claim.Delta)
				} else {
					decls = append(decls, claim.Seq)
				}
			case <-deadline:
				t.Fatalf("protocol %d: the consumer made again delivered declarations %v and rosters %v", host.protocol, decls, rosters)
			}
		}
		select {
		case m := <-got:
			t.Fatalf("protocol %d: the consumer made again delivered more than the last of each subject it filters: %s %.100s", host.protocol, m.Subject, m.Data)
		case <-time.After(500 * time.Millisecond):
		}
		sub.Unsubscribe()
		if len(decls) != 1 || decls[0] != lastDecl.Seq || !slices.Equal(rosters, host.rosters) {
			t.Fatalf("protocol %d: delivered declarations %v and rosters %v, want [%d] and %v", host.protocol, decls, rosters, lastDecl.Seq, host.rosters)
		}
	}
	// Its host now of protocol 6: the start deletes the consumer, and one
	// of no live node too.
	if err := ensureConsumer(ctx, c.js, "gone", spec.ProtocolRosterPublished); err != nil {
		t.Fatal(err)
	}
	if made, err := ensureConsumers(ctx, c.js, []store.Node{{Name: "beta", Protocol: spec.Protocol}}); err != nil || len(made) != 0 {
		t.Fatalf("a start with beta's host of protocol %d made %v, %v; want no consumer", spec.Protocol, made, err)
	}
	for _, name := range []string{"beta", "gone"} {
		if _, err := js.PushConsumer(ctx, spec.DeclarationStream, name); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Fatalf("%s's consumer after the start: %v, want none", name, err)
		}
	}
}
