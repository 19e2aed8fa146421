package mesh

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
)

// BenchmarkPushSend is the controller's side of a push to N nodes: compose,
// number, sign, record and publish each declaration (no host answers),
// forced since the content does not change between runs.
//
//	go test -run '^$' -bench 'PushSend|PushUnchanged' -benchtime 5x ./mesh
func BenchmarkPushSend(b *testing.B) {
	for _, n := range []int{50, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchmarkPush(b, n, true) })
	}
}

// BenchmarkPushUnchanged is a push to the same N nodes when nothing
// changed: compose and compare each node's digest, send nothing. Its peer
// is BenchmarkPushSend.
func BenchmarkPushUnchanged(b *testing.B) {
	for _, n := range []int{50, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchmarkPush(b, n, false) })
	}
}

// fleetOf is a controller's mesh of nodes nodes (alpha and n0001...), each
// with its consumer and module m (one directory, one route) assigned.
func fleetOf(b *testing.B, c *Controller, db *store.DB, clk *clock, nodes int) []string {
	ctx := context.Background()
	mod := spec.Module{Name: "m", Version: "1", Routes: []spec.Route{{Name: "web", Port: 80}}, Resources: []spec.Resource{resource("/srv")}}
	mod.Resources[0].Module, mod.Resources[0].Name = "m", spec.ResourceName("m", spec.KindDirectory, "/srv")
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, clk.Now()); err != nil {
		b.Fatal(err)
	}
	names := []string{"alpha"}
	for i := 1; i < nodes; i++ {
		name := fmt.Sprintf("n%04d", i)
		if err := db.AddNode(ctx, store.Node{Name: name, Address: "10.0.0.1", NKey: "U" + name, Joined: clk.Now()}); err != nil {
			b.Fatal(err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		if err := db.Assign(ctx, "m", name, nil, clk.Now()); err != nil {
			b.Fatal(err)
		}
	}
	return names
}

func benchmarkPush(b *testing.B, nodes int, force bool) {
	clk := &clock{now: time.Now()}
	c, db := newController(b, clk)
	ctx := context.Background()
	fleetOf(b, c, db, clk, nodes)
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := c.push(ctx, spec.PushRequest{Force: force})
		if err != nil {
			b.Fatal(err)
		}
		for _, pn := range res.Nodes {
			if pn.Unchanged == force || pn.Error != "" {
				b.Fatalf("push (force %v): %+v", force, pn)
			}
		}
	}
}

// BenchmarkReports is the controller taking one report from each of N
// nodes, each the report of the declaration last sent to it and awaited by
// a push: from the first published to the last forwarded to the push's
// caller (each recorded before it is forwarded).
//
//	go test -run '^$' -bench Reports -benchtime 5x ./mesh
func BenchmarkReports(b *testing.B) {
	for _, n := range []int{50, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchmarkReports(b, n) })
	}
}

func benchmarkReports(b *testing.B, nodes int) {
	clk := &clock{now: time.Now()}
	c, db := newController(b, clk)
	ctx := context.Background()
	names := fleetOf(b, c, db, clk, nodes)
	progress := spec.OperatorInbox + ".bench"
	events := make(chan *nats.Msg, 2*nodes)
	sub, err := c.nc.ChanSubscribe(progress, events)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := c.nc.Flush(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		res, err := c.push(ctx, spec.PushRequest{Force: true, Progress: progress})
		if err != nil {
			b.Fatal(err)
		}
		reports := make([][]byte, len(res.Nodes))
		for i, pn := range res.Nodes {
			if pn.Seq == 0 {
				b.Fatalf("not sent: %+v", pn)
			}
			reports[i] = mustJSON(b, spec.Report{Node: pn.Node, Seq: pn.Seq, Digest: "sha256:x"})
		}
		b.StartTimer()
		for i, name := range names {
			if err := c.nc.Publish(spec.NodeSubject(name, spec.KindReport), reports[i]); err != nil {
				b.Fatal(err)
			}
		}
		deadline := time.After(time.Minute)
		for range names {
			select {
			case <-events:
			case <-deadline:
				b.Fatal("not every report was forwarded within a minute")
			}
		}
	}
}

// BenchmarkPushRosterChange is a push whose only change is one route (a
// route-only module assigned to one node, and unassigned, in turns) to a
// mesh of N nodes that each serve a route of their own: the bytes and the
// messages the controller publishes for it: the roster delta alone. No
// host answers.
//
//	go test -run '^$' -bench PushRosterChange -benchtime 3x ./mesh
func BenchmarkPushRosterChange(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) { benchmarkRosterChange(b, n, spec.Protocol) })
	}
}

func benchmarkRosterChange(b *testing.B, nodes, protocol int) {
	clk := &clock{now: time.Now()}
	c, db := newController(b, clk)
	ctx := context.Background()
	mod := spec.Module{Name: "m", Version: "1", Routes: []spec.Route{{Name: "web", Port: 80}}, Resources: []spec.Resource{resource("/srv")}}
	mod.Resources[0].Module, mod.Resources[0].Name = "m", spec.ResourceName("m", spec.KindDirectory, "/srv")
	extra := spec.Module{Name: "extra", Version: "1", Routes: []spec.Route{{Name: "extra", Port: 9}}}
	if _, err := db.RegisterModules(ctx, []spec.Module{mod, extra}, clk.Now()); err != nil {
		b.Fatal(err)
	}
	var beats []spec.Heartbeat
	for i := range nodes {
		name := fmt.Sprintf("n%04d", i)
		if err := db.AddNode(ctx, store.Node{Name: name, Address: fmt.Sprintf("10.%d.%d.1", i/256, i%256), NKey: "U" + name, Joined: clk.Now()}); err != nil {
			b.Fatal(err)
		}
		if err := db.Assign(ctx, "m", name, nil, clk.Now()); err != nil {
			b.Fatal(err)
		}
		beats = append(beats, spec.Heartbeat{Node: name, Protocol: protocol})
	}
	if _, err := db.RecordHeartbeats(ctx, beats, clk.Now()); err != nil {
		b.Fatal(err)
	}
	published := make(chan *nats.Msg, 4*nodes+16)
	for _, subject := range []string{spec.DeclarationSubject("*"), spec.RosterSubject} {
		sub, err := c.nc.ChanSubscribe(subject, published)
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
		b.Fatal(err)
	}
	drain := func() (msgs, bytes int) {
		for {
			select {
			case m := <-published:
				msgs++
				bytes += len(m.Subject) + len(m.Data) + len(m.Header.Get(spec.SigHeader))
			default:
				return msgs, bytes
			}
		}
	}
	drain()
	assigned := false
	var msgs, bytes int
	for b.Loop() {
		b.StopTimer()
		var err error
		if assigned {
			err = db.Unassign(ctx, "extra", "n0000")
		} else {
			err = db.Assign(ctx, "extra", "n0000", nil, clk.Now())
		}
		if err != nil {
			b.Fatal(err)
		}
		assigned = !assigned
		b.StartTimer()
		if _, err := c.push(ctx, spec.PushRequest{}); err != nil {
			b.Fatal(err)
		}
		m, n := drain()
		msgs, bytes = msgs+m, bytes+n
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/push")
	b.ReportMetric(float64(msgs)/float64(b.N), "msgs/push")
}
