package host_test

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// TestHeartbeatsGoOnDuringAnApply: while an apply waits (here on a blob
// the test, playing the controller, holds back), the host keeps sending
// heartbeats, each saying its interval: a long apply never makes a node
// silent to a controller that calls it so after two missed heartbeats.
func TestHeartbeatsGoOnDuringAnApply(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.heartbeat = 50 * time.Millisecond
	beats := make(chan spec.Heartbeat, 256)
	if _, err := b.nc.Subscribe(spec.NodeSubject("alpha", spec.KindHeartbeat), func(m *nats.Msg) {
		var hb spec.Heartbeat
		if err := spec.Decode(m.Data, &hb); err == nil {
			beats <- hb
		}
	}); err != nil {
		t.Fatal(err)
	}
	fetches := make(chan *nats.Msg, 4)
	if _, err := b.nc.ChanSubscribe(spec.NodeSubject("alpha", spec.KindBlob), fetches); err != nil {
		t.Fatal(err)
	}
	b.nc.Flush()
	b.start()

	content := bytes.Repeat([]byte("x"), 100<<10)
	big := spec.Resource{Name: spec.ResourceName("t", spec.KindFile, "/big"), Kind: spec.KindFile, Module: "t",
		Spec: &spec.FileSpec{Path: "/big", Mode: 0o644, Blob: true, Size: int64(len(content)), Digest: spec.ContentDigest(content)}}
	b.publish(encode(t, b.declaration(1, big)), nil)
	var fetch *nats.Msg
	select {
	case fetch = <-fetches:
	case <-time.After(20 * time.Second):
		t.Fatal("the host did not ask for the blob within 20s")
	}
	// The apply now waits on the blob: heartbeats sent before are not
	// counted, three sent after are wanted.
	for len(beats) > 0 {
		<-beats
	}
	for i := 0; i < 3; i++ {
		select {
		case hb := <-beats:
			if hb.IntervalMS != 50 {
				t.Fatalf("heartbeat says interval %d ms, want 50", hb.IntervalMS)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d heartbeat(s) while the apply waited, want 3", i)
		}
	}
	result, _ := json.Marshal(spec.BlobChunkReply{Size: int64(len(content)), Data: content})
	body, _ := json.Marshal(spec.Reply{Result: result})
	if err := fetch.Respond(body); err != nil {
		t.Fatal(err)
	}
	r := b.report()
	if len(r.Results) != 1 || r.Results[0].Outcome != spec.Created {
		t.Fatalf("report after the blob came: %+v", r)
	}
}

// TestHeartbeatAtReconnect: a host whose connection to the bus was lost
// (here its user withdrawn and put back, as a restarted controller's bus
// drops every connection) sends a heartbeat as soon as it is back, not at
// its next interval (an hour here): the controller hears a fleet again
// within the reconnects' spread.
func TestHeartbeatAtReconnect(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	beats := make(chan spec.Heartbeat, 16)
	if _, err := b.nc.Subscribe(spec.NodeSubject("alpha", spec.KindHeartbeat), func(m *nats.Msg) {
		var hb spec.Heartbeat
		if err := spec.Decode(m.Data, &hb); err == nil {
			beats <- hb
		}
	}); err != nil {
		t.Fatal(err)
	}
	b.nc.Flush()
	b.start()
	for len(beats) > 0 {
		<-beats
	}
	lost := time.Now()
	b.bus.WithdrawUser(b.nodeUser.NKey)
	if err := b.bus.AddUser(b.nodeUser); err != nil {
		t.Fatal(err)
	}
	// A heartbeat of the start may still be on its way: only one sent
	// after the connection was lost counts.
	timeout := time.After(20 * time.Second)
	for {
		select {
		case hb := <-beats:
			if hb.Time.After(lost) {
				return
			}
		case <-timeout:
			t.Fatal("no heartbeat within 20s of the host's connection lost: it waits for its next interval")
		}
	}
}
