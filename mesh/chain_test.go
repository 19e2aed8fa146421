package mesh

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
)

// TestDeclarationCarriesTheChain: every declaration pushed carries the
// intermediate that signs now, and only it; after the intermediate is
// replaced, a node whose facts name the old one is pending (a problem, no
// failure) until a push hands it the new chain and it says it holds it
// (the push sends though nothing else changed, and only once); a
// node that has not said which it holds is not called behind; a re-send
// after expiry carries the chain as it was sent.
func TestDeclarationCarriesTheChain(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	c, db := newController(t, clk)
	ctx := context.Background()
	auth := c.deps.CA
	heard := func(applied uint64, serial string) {
		t.Helper()
		if err := db.RecordHeartbeat(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: applied, HostVersion: "v1", Protocol: spec.Protocol}, clk.Now()); err != nil {
			t.Fatal(err)
		}
		body := mustJSON(t, spec.Report{Node: "alpha", Seq: applied, Results: []spec.ResourceResult{}})
		if err := db.RecordReport(ctx, store.Report{Node: "alpha", Seq: applied, Body: body, Received: clk.Now()}, true); err != nil {
			t.Fatal(err)
		}
		if err := db.RecordFacts(ctx, spec.Facts{Node: "alpha", Intermediate: serial}, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	push := func() spec.Declaration {
		t.Helper()
		res, err := c.push(ctx, spec.PushRequest{})
		if err != nil || len(res.Nodes) != 1 || res.Nodes[0].Error != "" || res.Nodes[0].Unchanged {
			t.Fatalf("push: %+v, %v; want alpha sent a declaration", res, err)
		}
		return lastOnStream(t, c, "alpha")
	}
	carries := func(d spec.Declaration, want string) {
		t.Helper()
		chain, err := ca.ParseChain([]byte(d.CAChain), auth.Root(), clk.Now())
		if err != nil || len(chain) != 1 || ca.SerialOf(chain[0]) != want {
			t.Fatalf("declaration %d carries %d intermediate(s) (%v), want %s alone", d.Seq, len(chain), err, want)
		}
	}

	first := ca.SerialOf(auth.Intermediate())
	carries(push(), first)
	heard(1, "")
	if res := statusOf(t, c); !res.AllClear || res.Intermediate != first || nodeStatus(res, "alpha").Intermediate != "" {
		t.Fatalf("a node that has not said which intermediate it holds: %+v", res)
	}
	heard(1, first)
	if res := statusOf(t, c); !res.AllClear || nodeStatus(res, "alpha").Intermediate != first {
		t.Fatalf("a node holding the mesh's intermediate: %+v", res)
	}

	if err := auth.Reissue(append(auth.Permitted(), "example.org"), clk.Now()); err != nil {
		t.Fatal(err)
	}
	second := ca.SerialOf(auth.Intermediate())
	res := statusOf(t, c)
	st := nodeStatus(res, "alpha")
	want := "alpha holds intermediate " + first + ", the mesh signs with " + second + " now: mesh push alpha hands it the new chain"
	if res.AllClear || res.Intermediate != second || !st.Pending || len(st.Failures) != 0 || !strings.Contains(strings.Join(res.Problems, "\n"), want) {
		t.Fatalf("a node holding the replaced intermediate: all clear %v, pending %v, failures %q, problems %q; want pending, no failure, %q",
			res.AllClear, st.Pending, st.Failures, res.Problems, want)
	}

	// A declaration sent before the replacement and expired unapplied is
	// re-sent as it was sent: with the old chain.
	sent := lastOnStream(t, c, "alpha")
	if _, _, err := c.sender.send(ctx, "alpha", contentOf(sent), resendAll); err != nil {
		t.Fatal(err)
	}
	clk.Add(spec.DefaultExpiry + time.Minute)
	if err := c.sender.resendIfExpired(ctx, spec.Heartbeat{Node: "alpha", AppliedSeq: 1}); err != nil {
		t.Fatal(err)
	}
	if d := lastOnStream(t, c, "alpha"); d.Seq != 3 {
		t.Fatalf("the expired declaration was not re-sent: last %d", d.Seq)
	} else {
		carries(d, first)
	}

	// Nothing else changed, yet the push sends: the chain is part of what
	// a node holds. Pushed again, nothing is sent.
	d := push()
	carries(d, second)
	heard(d.Seq, second)
	if res := statusOf(t, c); !res.AllClear {
		t.Fatalf("after the push, the node holding the new intermediate: problems %q", res.Problems)
	}
	if res, err := c.push(ctx, spec.PushRequest{}); err != nil || !res.Nodes[0].Unchanged {
		t.Fatalf("a push with nothing new: %+v, %v; want alpha unchanged", res, err)
	}
}

// TestWouldNotFitCountsTheChain: status sizes the declaration a push would
// send as send encodes it, its CA chain included: one that fits only
// without the chain is said not to fit.
func TestWouldNotFitCountsTheChain(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	c, _ := newController(t, clk)
	chain := ComposeChain(c.deps.CA.Intermediate())
	file := func(n int) []spec.Resource {
		content := []byte(strings.Repeat("a", n))
		return []spec.Resource{{Name: spec.ResourceName("m", spec.KindFile, "/f"), Kind: spec.KindFile, Module: "m",
			Spec: &spec.FileSpec{Path: "/f", Mode: 0o644, Content: content, Size: int64(n), Digest: spec.ContentDigest(content)}}}
	}
	fits := func(n int, chain string) bool {
		return c.wouldNotFit("m", "alpha", 1, content{resources: file(n), chain: chain}) == nil
	}
	// The largest content that fits without the chain.
	lo, hi := 0, spec.MaxDeclaration
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fits(mid, "") {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if !fits(lo, "") || fits(lo, chain) {
		t.Fatalf("a declaration that fits only without its chain (content %d bytes): fits without %v, with %v; want true, false", lo, fits(lo, ""), fits(lo, chain))
	}
}
