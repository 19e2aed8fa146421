package cli

import (
	"testing"

	"github.com/mesh-fleet/mesh/statedir"
	"github.com/urfave/cli/v2"
)

// TestLauncherHoldsTheResolverAddress: the launcher holds the address the
// child will bind, whichever way it was given, the flag's default on a
// first start included (a join given no --dns left it unheld, and the
// first swap after it refused queries).
func TestLauncherHoldsTheResolverAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		kept statedir.Config
		want string
	}{
		{"given", []string{"--dns", "127.0.0.1:5300"}, statedir.Config{"dns": {"127.0.0.1:5301"}}, "127.0.0.1:5300"},
		{"kept", nil, statedir.Config{"dns": {"127.0.0.1:5301"}}, "127.0.0.1:5301"},
		{"first start, not given", nil, statedir.Config{}, "127.0.0.1:53"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			// HideHelp: urfave/cli applies its one global help flag in every
			// App.Run, a write that races with TestMainWritesThroughScreens.
			app := &cli.App{HideHelp: true, Flags: hostCommandFlags(), Action: func(c *cli.Context) error {
				got = launcherDNS(c, tc.kept)
				return nil
			}}
			if err := app.Run(append([]string{"mesh"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("the launcher holds %q, want %q", got, tc.want)
			}
		})
	}
}
