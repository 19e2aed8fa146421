package host_test

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/resolver"
	"github.com/mesh-fleet/mesh/spec"
)

// TestRostersFromTheRepublish: with no consumer delivering roster
// messages, a host takes them from the stream's republish (a whole roster,
// then a delta on it); one published while it was stopped reaches nobody
// again, so the host asks, when it connects, for the roster in force,
// naming the one it holds, and takes the answer. (The controller's answer
// to a host that holds the roster in force: TestRosterRequestAnsweredOnly-
// UnderTheNodesInbox.)
func TestRostersFromTheRepublish(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	names := runResolver(t, resolver.Zone{})
	b.names = names
	r1 := rosterDoc(1, "10.1.0.1")
	raw1 := encodeRoster(t, r1)
	r2 := rosterDoc(2, "10.1.0.2")
	raw2 := encodeRoster(t, r2)
	r3 := rosterDoc(3, "10.1.0.3")
	raw3 := encodeRoster(t, r3)
	inForce := make(chan []byte, 1)
	checks := make(chan spec.RosterRequest, 16)
	b.answerRosterRequests(true, func(req spec.RosterRequest) []byte {
		checks <- req
		select {
		case raw := <-inForce:
			return raw
		default:
			return nil
		}
	})
	b.start()
	if req := <-checks; req.Want != 0 || req.Have != 0 || req.HaveDigest != "" {
		t.Fatalf("a host holding no roster checked with %+v, want nothing named", req)
	}

	b.publishRoster(raw1, nil)
	servesWeb(t, names, "10.1.0.1")
	b.publishDelta(b.deltaTo(r1, raw1, r2), nil)
	servesWeb(t, names, "10.1.0.2")
	if seq := keptRosterSeq(t, b); seq != 2 {
		t.Fatalf("kept roster %d, want 2", seq)
	}

	b.stop()
	b.publishDelta(b.deltaTo(r2, raw2, r3), nil)
	inForce <- raw3
	b.start()
	if req := <-checks; req.Want != 0 || req.Have != 2 || req.HaveDigest != spec.ContentDigest(raw2) {
		t.Fatalf("a host holding roster 2 checked with %+v, want roster 2 named", req)
	}
	servesWeb(t, names, "10.1.0.3")
	if seq := keptRosterSeq(t, b); seq != 3 {
		t.Fatalf("kept roster %d after the check, want 3", seq)
	}
}

// TestDeclarationsFromTheRepublish: with no consumer, a host takes its
// declarations from the stream's republish; one published while it was
// stopped reaches nobody again, so the host asks, when it connects, for
// its node's last declaration, naming the one it holds, and applies the
// answer; one it could not keep (state.json not written) is reported so,
// asked for again by its own timer, then kept and applied, not dropped as
// a duplicate of itself.
func TestDeclarationsFromTheRepublish(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	asked := make(chan spec.DeclarationRequest, 16)
	b.asked = asked
	var writes *atomic.Int64
	var failed atomic.Bool
	b.prepare = func(a *host.Agent) {
		writes = host.CountStateWrites(a, func(n int64) error {
			if n == 1 && !failed.Swap(true) {
				return errors.New("no space left on device")
			}
			return nil
		})
	}
	b.start()
	if req := <-asked; req.Have != "" {
		t.Fatalf("a host holding no declaration asked naming %q", req.Have)
	}
	d1 := encode(t, b.declaration(1, fileResource("/one", "1")))
	b.publish(d1, nil)
	if r := b.report(); r.Seq != 1 || r.Unkept != "no space left on device" {
		t.Fatalf("declaration 1, not kept at first: report %+v, want it to say why", r)
	}
	if r := b.report(); r.Seq != 1 || r.Refused != "" || r.Unkept != "" || !b.exists("/one") {
		t.Fatalf("declaration 1, not kept at first, then asked for again: report %+v", r)
	}
	if req := <-asked; req.Have != "" {
		t.Fatalf("a host that could not keep declaration 1 asked again naming %q, want none held", req.Have)
	}
	if n := writes.Load(); n != 3 {
		t.Fatalf("%d state.json writes, want 3 (the one that failed, the keeping, the record)", n)
	}

	b.stop()
	b.publish(encode(t, b.declaration(2, fileResource("/two", "2"))), nil)
	b.start()
	if req := <-asked; req.Have != spec.ContentDigest(d1) {
		t.Fatalf("a host holding declaration 1 asked naming %q, want its digest", req.Have)
	}
	r := b.report()
	if r.Reconcile && r.Seq == 1 {
		r = b.report() // the start's pass over what it kept
	}
	if r.Seq != 2 || r.Refused != "" || !b.exists("/two") {
		t.Fatalf("declaration 2, published while the host was stopped: report %+v", r)
	}
	if st, _, err := host.ReadState(b.hostDir); err != nil || st.Seq != 2 {
		t.Fatalf("kept %d (%v), want 2", st.Seq, err)
	}
}
