package cli

import (
	"slices"
	"strings"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

func assignCommands() []*cli.Command {
	mk := func(name string, verb spec.Verb[spec.AssignRequest, spec.AssignResult], usage, past, description string, flags []cli.Flag) *cli.Command {
		return &cli.Command{
			Name:        name,
			Usage:       usage,
			ArgsUsage:   "MODULE NODE",
			Description: description,
			Flags:       flags,
			Action: func(c *cli.Context) error {
				if err := wantArgs(c, 2, "two arguments, the module and the node"); err != nil {
					return err
				}
				req := spec.AssignRequest{Module: c.Args().Get(0), Node: c.Args().Get(1)}
				if err := spec.CheckName("module", req.Module); err != nil {
					return usageError{err.Error()}
				}
				if err := spec.CheckName("node", req.Node); err != nil {
					return usageError{err.Error()}
				}
				for _, kv := range c.StringSlice("set") {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return usagef("--set %q: give NAME=VALUE", kv)
					}
					if req.Settings == nil {
						req.Settings = map[string]string{}
					}
					if _, dup := req.Settings[k]; dup {
						return usagef("--set %s is given twice", k)
					}
					req.Settings[k] = v
				}
				for _, name := range c.StringSlice("unset") {
					if name == "" || strings.Contains(name, "=") {
						return usagef("--unset %q: give the NAME of a setting", name)
					}
					if slices.Contains(req.Unset, name) {
						return usagef("--unset %s is given twice", name)
					}
					if _, both := req.Settings[name]; both {
						return usagef("--set and --unset both name %s: give one", name)
					}
					req.Unset = append(req.Unset, name)
				}
				for _, kv := range c.StringSlice("grant") {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" || v == "" {
						return usagef("--grant %q: give GRANT=NODE", kv)
					}
					if req.Grants == nil {
						req.Grants = map[string]string{}
					}
					if _, dup := req.Grants[k]; dup {
						return usagef("--grant %s is given twice", k)
					}
					req.Grants[k] = v
				}
				req.Force = c.Bool("force")
				res, err := callCmd(c, verb, req)
				if err != nil {
					return err
				}
				printAssigned(c.App.Writer, req.Module+" "+past+" "+req.Node, res)
				return nil
			},
		}
	}
	return []*cli.Command{
		mk("assign", spec.Assign, "assign a module to a node, with its settings", "assigned to",
			`Gives the module its settings on that node (--set NAME=VALUE, once per
setting); a required setting left out, a value of the wrong type, or a name
the module does not declare is refused, naming it, and nothing is recorded.
Assigning again keeps the settings it is not given, secrets included, and
--unset NAME drops one, which then takes its default (a required setting
with no default cannot be unset). A module that consumes a grant is
minted a credential for it, kept when assigned again; the settings the grant
fills are not given. Several nodes providing the grant: name one with
--grant GRANT=NODE. Takes effect at the next mesh push.

Example:
   mesh assign --set greeting=hello --set port=8080 hello alpha && mesh push alpha
   mesh assign --set greeting=hi hello alpha     # port stays 8080
   mesh assign --unset greeting hello alpha      # greeting back to its default`,
			[]cli.Flag{dirFlag(), &cli.StringSliceFlag{Name: "set", Usage: "a setting, NAME=VALUE (repeat for each); settings not given keep their values"},
				&cli.StringSliceFlag{Name: "unset", Usage: "a setting to drop, NAME, back to its default (repeat for each)"},
				&cli.StringSliceFlag{Name: "grant", Usage: "the node whose provider a consumed grant is given, GRANT=NODE (repeat for each)"}}),
		mk("unassign", spec.Unassign, "unassign a module from a node: the next push removes what it declared there", "unassigned from",
			`A module that provides a grant its consumers still hold is refused, naming
them, unless --force (they keep their last credential, orphaned). Takes
effect at the next mesh push.

Example:
   mesh unassign motd alpha && mesh push alpha`,
			[]cli.Flag{dirFlag(), &cli.BoolFlag{Name: "force", Usage: "unassign a provider whose consumers still hold its grant"}}),
	}
}
