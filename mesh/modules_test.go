package mesh

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestAssignNamesTheRule: a module or node name that breaks the naming rule
// is refused naming the rule, never as "not found", and nothing changes.
func TestAssignNamesTheRule(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	mod := spec.Module{Name: "motd", Version: "1", Resources: []spec.Resource{}}
	if _, err := db.RegisterModules(ctx, []spec.Module{mod}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		req  spec.AssignRequest
		want string
	}{
		{spec.AssignRequest{Module: "motd", Node: "Beta_1"}, `node name "Beta_1" holds 'B': use only a-z, 0-9 and '-'`},
		{spec.AssignRequest{Module: "motd", Node: "beta.internal"}, `node name "beta.internal" holds '.'`},
		{spec.AssignRequest{Module: "motd", Node: strings.Repeat("b", 64)}, "a DNS label holds at most 63"},
		{spec.AssignRequest{Module: "Motd", Node: "beta"}, `module name "Motd" holds 'M'`},
	} {
		for verb, call := range map[string]func(context.Context, spec.AssignRequest) (spec.AssignResult, error){"assign": c.modules.assign, "unassign": c.modules.unassign} {
			_, err := call(ctx, tc.req)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "not") && strings.Contains(err.Error(), "found") || spec.KindOf(err) != spec.ReplyCaller {
				t.Errorf("%s %+v: %v, want the caller's error naming the rule %q", verb, tc.req, err, tc.want)
			}
		}
	}
	if as, err := db.Assignments(ctx); err != nil || len(as) != 0 {
		t.Fatalf("assignments after refusals: %v %v", as, err)
	}
}
