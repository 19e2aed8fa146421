package mesh

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestAssignAgainKeepsTheSettingsNotGiven: a second assign changes the
// settings it is given and keeps the others, a secret's sealed text as it
// is stored; --unset drops one, back to its default; unsetting a setting
// the module does not declare, one given as well, or a required one with
// no default is refused, naming it, and nothing changes.
func TestAssignAgainKeepsTheSettingsNotGiven(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	m := vaultModule()
	world := "world"
	m.Settings = []spec.Setting{{Name: "token", Type: spec.TypeString, Secret: true, Required: true}, {Name: "who", Type: spec.TypeString, Default: &world}}
	if _, err := db.RegisterModules(ctx, []spec.Module{m}, clk.Now()); err != nil {
		t.Fatal(err)
	}
	assign := func(set map[string]string, unset ...string) error {
		_, err := c.modules.assign(ctx, spec.AssignRequest{Module: "vault", Node: "alpha", Settings: set, Unset: unset})
		return err
	}
	secret := distinct("SuperSecret-")
	if err := assign(map[string]string{"token": secret, "who": "me"}); err != nil {
		t.Fatal(err)
	}
	sealed := rawSetting(t, db, "vault", "alpha", "token")

	if err := assign(map[string]string{"who": "you"}); err != nil {
		t.Fatalf("assign again with one setting: %v, want the other kept", err)
	}
	if got, want := fileContent(t, c, "alpha", "/srv/vault/env"), "token="+secret+" who=you"; got != want {
		t.Errorf("composed %q, want %q", got, want)
	}
	if raw := rawSetting(t, db, "vault", "alpha", "token"); raw != sealed {
		t.Errorf("the kept secret is stored as %q, want its sealed text as it was, %q", raw, sealed)
	}

	if err := assign(nil, "who"); err != nil {
		t.Fatalf("unset who: %v", err)
	}
	if got, want := fileContent(t, c, "alpha", "/srv/vault/env"), "token="+secret+" who=world"; got != want {
		t.Errorf("composed %q after unset, want %q (the default)", got, want)
	}

	for _, tc := range []struct {
		set   map[string]string
		unset []string
		want  string
	}{
		{nil, []string{"token"}, `--unset token: setting "token" of module "vault" is required and has no default: give it another value instead (--set token=VALUE); nothing was assigned`},
		{nil, []string{"colour"}, `--unset colour: module "vault" declares no setting "colour" (it declares: token, who); nothing was assigned`},
		{map[string]string{"who": "x"}, []string{"who"}, `setting "who" is both set and unset; nothing was assigned`},
	} {
		err := assign(tc.set, tc.unset...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("assign %v, unset %v: %v, want %q", tc.set, tc.unset, err, tc.want)
		}
		if raw := rawSetting(t, db, "vault", "alpha", "token"); raw != sealed {
			t.Errorf("a refused assign changed the secret to %q", raw)
		}
		if got, want := fileContent(t, c, "alpha", "/srv/vault/env"), "token="+secret+" who=world"; got != want {
			t.Errorf("a refused assign changed the composition to %q, want %q", got, want)
		}
	}
}
