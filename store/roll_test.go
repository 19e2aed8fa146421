package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// TestRolls: a roll is recorded with its nodes pending, and another is
// refused while it runs or is halted; a step begun makes the node's
// declarations carry the release, in the same write; a failed step halts
// the roll, resume makes its failed node pending again, abort ends it; the
// node's binary goes with the node. A heartbeat's fallbacks are kept.
func TestRolls(t *testing.T) {
	t.Parallel()
	db, _ := openTemp(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	rel := store.Release{Digest: "cc33", GOOS: "linux", GOARCH: "amd64", Go: "go1.26.8", Size: 3, Published: at}
	if err := db.PutBlob(ctx, rel.Blob(), []byte("abc"), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PublishRelease(ctx, rel); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"alpha", "beta"} {
		if err := db.AddNode(ctx, store.Node{Name: n, Address: "10.0.0.1", NKey: "U" + n, Joined: at}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ActiveRoll(ctx); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("no roll yet: %v", err)
	}
	r, err := db.StartRoll(ctx, store.Roll{Digest: rel.Digest, HealthyWithin: time.Minute, Started: at,
		Nodes: []store.RollNode{{Node: "beta"}, {Node: "alpha"}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID == 0 || r.State != spec.RollRunning || r.Nodes[1].State != spec.RollPending || r.Nodes[1].Position != 1 {
		t.Fatalf("started %+v", r)
	}
	if active, err := db.StartRoll(ctx, store.Roll{Digest: rel.Digest, Started: at}); !errors.Is(err, store.ErrRollActive) || active.ID != r.ID {
		t.Errorf("a second roll: %v (%+v), want ErrRollActive with the first", err, active)
	}

	if _, err := db.NodeBinary(ctx, "beta"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("beta's binary before its step: %v", err)
	}
	if err := db.BeginRollStep(ctx, r.ID, 0, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if b, err := db.NodeBinary(ctx, "beta"); err != nil || b.Digest != rel.Digest {
		t.Errorf("beta's binary after its step began: %+v %v", b, err)
	}
	if err := db.EndRollStep(ctx, r.ID, 0, spec.RollFailed, "beta fell back", at.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := db.ActiveRoll(ctx)
	if err != nil || got.State != spec.RollHalted || got.Cause != "beta fell back" || got.Nodes[0].State != spec.RollFailed || got.Nodes[0].Started.IsZero() || got.Nodes[0].Ended.IsZero() {
		t.Fatalf("after a failed step: %+v %v", got, err)
	}
	if err := db.BeginRollStep(ctx, r.ID, 1, at); !errors.Is(err, store.ErrRollActive) {
		t.Errorf("a step of a halted roll: %v", err)
	}
	got, err = db.ResumeRoll(ctx, []string{"beta", "alpha"})
	if err != nil || got.State != spec.RollRunning || got.Cause != "" || got.Nodes[0].State != spec.RollPending || !got.Nodes[0].Started.IsZero() {
		t.Fatalf("resumed: %+v %v", got, err)
	}
	if _, err := db.ResumeRoll(ctx, []string{"beta", "alpha"}); !errors.Is(err, store.ErrRollActive) {
		t.Errorf("resuming a running roll: %v", err)
	}
	// The failed node named is asked to try the release again, and its
	// step begun again keeps the count; alpha, not failed, is asked
	// nothing.
	if b, err := db.NodeBinary(ctx, "beta"); err != nil || b.Retry != 1 {
		t.Errorf("beta's binary after the resume: %+v %v, want retry 1", b, err)
	}
	if err := db.BeginRollStep(ctx, r.ID, 0, at.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if bs, err := db.NodeBinaries(ctx); err != nil || bs["beta"].Retry != 1 || len(bs) != 1 {
		t.Errorf("the binaries after beta's step began again: %+v %v, want beta's with retry 1", bs, err)
	}
	// beta sent again, failed again: abort declares it what it carried
	// before the roll (nothing), alpha never sent is untouched.
	got, reverted, err := db.AbortRoll(ctx, at.Add(time.Minute))
	if err != nil || got.State != spec.RollAborted || !got.Ended.Equal(at.Add(time.Minute)) || strings.Join(reverted, ",") != "beta" {
		t.Fatalf("aborted: %+v %v %v", got, reverted, err)
	}
	if _, err := db.NodeBinary(ctx, "beta"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("beta's binary after the abort: %v, want none, as before the roll", err)
	}
	for name, err := range map[string]error{"resume": func() error { _, err := db.ResumeRoll(ctx, []string{"beta", "alpha"}); return err }(),
		"abort": func() error { _, _, err := db.AbortRoll(ctx, at); return err }()} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s with no active roll: %v", name, err)
		}
	}
	if latest, err := db.RollByID(ctx, 0); err != nil || latest.ID != r.ID {
		t.Errorf("latest roll %+v %v", latest, err)
	}

	fb := []spec.Fallback{{Digest: rel.Digest, Reason: "exit status 2", At: at}}
	if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "beta", HostVersion: "v1", Protocol: spec.Protocol, Fallbacks: fb}, at); err != nil {
		t.Fatal(err)
	}
	if n, err := db.Node(ctx, "beta"); err != nil || len(n.Fallbacks) != 1 || n.Fallbacks[0].Reason != "exit status 2" {
		t.Errorf("beta's fallbacks: %+v %v", n.Fallbacks, err)
	}
	if _, err := db.RecordHeartbeats(ctx, []spec.Heartbeat{{Node: "beta", HostVersion: "v1", Protocol: spec.Protocol}}, at); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.Node(ctx, "beta"); len(n.Fallbacks) != 0 {
		t.Errorf("a heartbeat without fallbacks kept %+v", n.Fallbacks)
	}

	if err := db.RemoveNode(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if bs, err := db.NodeBinaries(ctx); err != nil || len(bs) != 0 {
		t.Errorf("binaries after beta's removal: %+v %v", bs, err)
	}
	if r, err := db.RollByID(ctx, r.ID); err != nil || r.Nodes[0].Node != "beta" {
		t.Errorf("the roll's history lost beta: %+v %v", r, err)
	}
}
