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

// TestRegisterRefusesSecretInEnv: a module sent straight over the bus,
// never through a CLI's manifest parser, with a secret setting in a
// container's environment is refused by module register, naming the
// container's secrets and the image's _FILE variable, and nothing is
// registered: the plain value would be composed into env otherwise.
func TestRegisterRefusesSecretInEnv(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	mod := spec.Module{Name: "app", Version: "1", Settings: []spec.Setting{{Name: "db_password", Type: spec.TypeString, Secret: true}},
		Resources: spec.Resources{{Name: spec.ResourceName("app", spec.KindContainer, "app"), Kind: spec.KindContainer, Module: "app",
			Spec: &spec.ContainerSpec{Name: "app", Image: "example/app:1", Env: map[string]string{"DB_PASSWORD": "${db_password}"}}}}}
	_, err := c.call(ctx, spec.ModuleRegister.Name, mustJSON(t, spec.ModuleRegisterRequest{Modules: []spec.Module{mod}}))
	if err == nil || spec.KindOf(err) != spec.ReplyCaller {
		t.Fatalf("register with a secret in env: %v, want the caller's error", err)
	}
	for _, want := range []string{"${db_password} is a secret setting", `"secrets": [{"setting": "db_password"`, "DB_PASSWORD_FILE=/run/secrets/db_password", "nothing was registered"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("register with a secret in env: %v, want it to say %q", err, want)
		}
	}
	if ms, err := db.Modules(ctx); err != nil || len(ms) != 0 {
		t.Fatalf("modules after the refusal: %v %v", ms, err)
	}
}
