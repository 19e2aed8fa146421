package daemon

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/optin"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
)

// TestRemovedControllerIsReplaced: of three controllers, one is stopped
// for good and removed by its node's name: JetStream drops its server
// and the two left run without it. The leader cannot remove itself, nor
// can the cluster go below two. A fourth joins in its place, and then,
// with another of the first three stopped, the two left still take a
// write: the fourth holds the truth's replicas and counts in JetStream's
// majority, and the removed server no longer does.
func TestRemovedControllerIsReplaced(t *testing.T) {
	optin.NeedSlow(t, "four controllers on real clustered buses, one removed")
	dirA, busA, _ := genesisRig(t)
	join := func(node string) (*controllerRig, string) {
		t.Helper()
		tok := controllerToken(t, dirA, busA, node)
		dir, bus, _, err := joinRig(t, tok)
		if err != nil {
			t.Fatal(err)
		}
		return runRig(t, dir, bus), dir
	}
	b, dirB := join("beta")
	c, dirC := join("gamma")
	for _, dir := range []string{dirA, dirB, dirC} {
		poll.Until(t, time.Minute, "three peers in "+dir, func() error {
			peers := peersOf(t, dir)
			if len(peers) == 3 {
				return nil
			}
			return errors.New(strings.Join(peers, ","))
		})
	}
	// Gamma runs, and a write through the three lands, before it stops:
	// one stopped while it still catches up leaves the streams it was
	// placed on short of a majority for a while.
	select {
	case <-c.m.Ready():
	case <-time.After(2 * time.Minute):
		t.Fatal("gamma was not ready within 2 minutes")
	}
	poll.Until(t, 2*time.Minute, "a write with the three up", func() error {
		_, err := operatorCall(t.Context(), dirA, busA, spec.TokenCreate, spec.TokenCreateRequest{Node: "eta", TTL: time.Hour})
		return err
	})
	gamma := serverOf(t, dirC)
	c.stop()

	var res spec.ControllerRemoveResult
	// JetStream's meta layer answers a removal once it has a leader of
	// the servers left; on two cores shared with the rest of the suite
	// that has taken over 3 minutes.
	poll.Until(t, 6*time.Minute, "gamma removed", func() error {
		var err error
		res, err = operatorCall(t.Context(), dirA, busA, spec.ClusterRemove, spec.ControllerRemoveRequest{Name: "gamma"})
		return err
	})
	if res.Server != gamma || res.Node != "gamma" || len(res.Peers) != 2 {
		t.Fatalf("the removal answered %+v, want server %s, node gamma, two peers left", res, gamma)
	}
	for _, dir := range []string{dirA, dirB} {
		poll.Until(t, time.Minute, "two peers in "+dir, func() error {
			peers := peersOf(t, dir)
			if len(peers) == 2 && !slices.Contains(peers, gamma) {
				return nil
			}
			return errors.New(strings.Join(peers, ","))
		})
	}
	// Two left: neither can go.
	_, err := callWhenServed(t, dirA, busA, spec.ControllerRemoveRequest{Name: "beta"})
	if spec.KindOf(err) != spec.ReplyRefused || !strings.Contains(err.Error(), "join another first") {
		t.Fatalf("removing one of two: %v, want it refused", err)
	}
	_, err = callWhenServed(t, dirA, busA, spec.ControllerRemoveRequest{Name: "nosuch"})
	if spec.KindOf(err) != spec.ReplyNotFound {
		t.Fatalf("removing a controller the cluster does not have: %v, want not found", err)
	}

	d, dirD := join("delta")
	for _, dir := range []string{dirA, dirB, dirD} {
		poll.Until(t, time.Minute, "three peers in "+dir, func() error {
			peers := peersOf(t, dir)
			if len(peers) == 3 && !slices.Contains(peers, gamma) {
				return nil
			}
			return errors.New(strings.Join(peers, ","))
		})
	}
	// The fourth holds the truth's replicas once the cluster placed them.
	// Delta runs, and a write through the three lands: the cluster placed
	// the truth's replicas on it.
	select {
	case <-d.m.Ready():
	case <-time.After(2 * time.Minute):
		t.Fatal("delta was not ready within 2 minutes")
	}
	poll.Until(t, 2*time.Minute, "a write with the three up", func() error {
		_, err := operatorCall(t.Context(), dirA, busA, spec.TokenCreate, spec.TokenCreateRequest{Node: "zeta", TTL: time.Hour})
		return err
	})
	for _, stream := range []string{"KV_truth", spec.DeclarationStream} {
		poll.Until(t, 2*time.Minute, stream+" kept by delta", func() error {
			if storesStream(dirD, stream) {
				return nil
			}
			return errors.New("")
		})
	}
	b.stop()
	// The controller starts once JetStream serves its streams with beta
	// gone, which under the suite's load has taken over 2 minutes.
	poll.Until(t, 6*time.Minute, "a write with alpha and delta up", func() error {
		_, err := operatorCall(t.Context(), dirA, busA, spec.TokenCreate, spec.TokenCreateRequest{Node: "epsilon", TTL: time.Hour})
		return err
	})
}

// serverOf is the cluster server name of the controller kept in dir.
func serverOf(t *testing.T, dir string) string {
	t.Helper()
	st, err := ReadClusterState(dir)
	if err != nil || st == nil {
		t.Fatalf("cluster state of %s: %v", dir, err)
	}
	return st.Server
}

// callWhenServed calls cluster.remove until a controller serves it (an
// answer, whatever it says), and returns its answer.
func callWhenServed(t *testing.T, dir, bus string, req spec.ControllerRemoveRequest) (spec.ControllerRemoveResult, error) {
	t.Helper()
	var res spec.ControllerRemoveResult
	var err error
	poll.Until(t, 90*time.Second, "cluster.remove served", func() error {
		res, err = operatorCall(t.Context(), dir, bus, spec.ClusterRemove, req)
		if spec.KindOf(err) != spec.ReplyFailed || err == nil {
			return nil
		}
		return err
	})
	return res, err
}
