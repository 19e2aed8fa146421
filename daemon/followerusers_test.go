package daemon

import (
	"slices"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/spec"
)

// TestFollowerKeepsAUsedTokensUserAWhile: a token's enrolment user the
// view no longer holds (its token used through the leader) stays on a
// follower's server for enrolGrace, so the joining host connected there
// hears the leader's answer; a node's user left out goes at once.
func TestFollowerKeepsAUsedTokensUserAWhile(t *testing.T) {
	t.Parallel()
	p := spec.EnrolPermissions("t1")
	token := broker.User{NKey: "UTOKEN", Publish: p.Publish, Subscribe: p.Subscribe}
	n := spec.NodePermissions("beta")
	node := broker.User{NKey: "UNODE", Publish: n.Publish, Subscribe: n.Subscribe}
	ctl := broker.User{NKey: "UCTL", Full: true}
	last := []broker.User{ctl, token, node}
	gone := map[string]time.Time{}
	t0 := time.Now()
	keys := func(us []broker.User) []string {
		var ks []string
		for _, u := range us {
			ks = append(ks, u.NKey)
		}
		slices.Sort(ks)
		return ks
	}
	for _, tc := range []struct {
		at   time.Duration
		want []string
	}{
		{0, []string{"UCTL", "UTOKEN"}},
		{enrolGrace - time.Second, []string{"UCTL", "UTOKEN"}},
		{enrolGrace, []string{"UCTL"}},
	} {
		got := keys(keepEnrolments(last, []broker.User{ctl}, gone, t0.Add(tc.at)))
		if !slices.Equal(got, tc.want) {
			t.Errorf("at %s: users %q, want %q", tc.at, got, tc.want)
		}
	}
	if len(gone) != 0 {
		t.Errorf("a user past its grace is still remembered: %v", gone)
	}
}
