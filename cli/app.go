// Package cli is the mesh command: its commands, flags and output. main.go
// at the top of the repository calls Main and nothing else.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/mesh-fleet/mesh/daemon"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/launch"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/urfave/cli/v2"
)

// usageError is a mistake in how a command was called: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// Exit codes scripts can rely on.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed
	exitUsage = 2 // the command was called wrongly; nothing was done
	// exitRemoved: mesh host stopped because its node was removed from the
	// mesh (the bus refuses its credential), or mesh controller because it
	// was removed from its cluster; starting it again cannot help.
	exitRemoved = 3
)

// Main runs the mesh command line args and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	// SIGINT and SIGTERM cancel the command's context from the first
	// instruction: a signal during a join or a start-up is a clean stop,
	// never the default abrupt exit.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	app := newApp(stdout, stderr)
	err := app.RunContext(ctx, args)
	if err == nil {
		return exitOK
	}
	// A launcher's child said why it stopped, on the same stderr: the
	// launcher exits with its status and adds nothing.
	var child *launch.ExitError
	if errors.As(err, &child) {
		return child.Code
	}
	if strings.HasPrefix(err.Error(), "No help topic for ") {
		err = unknownCommand(app, args)
	}
	var q quietError
	if !errors.As(err, &q) {
		fmt.Fprintf(app.ErrWriter, "mesh: %v\n", err)
	}
	var u usageError
	if errors.As(err, &u) || isFlagError(err) {
		return exitUsage
	}
	// The controller's answer says whose the error is: a bad argument or a
	// name it does not hold is the call's; a refusal or its own failure is not.
	var re *spec.ReplyError
	if errors.As(err, &re) && re.CalledWrongly() {
		return exitUsage
	}
	if errors.Is(err, host.ErrRemoved) || errors.Is(err, daemon.ErrRemoved) {
		return exitRemoved
	}
	if errors.Is(err, host.ErrStandAside) {
		return spec.ExitStandAside
	}
	if errors.Is(err, daemon.ErrRestart) {
		return spec.ExitRestart
	}
	return exitFail
}

// unknownCommand names the word of args that is no command, and where the
// commands it could have been are listed: called wrongly, exit code 2.
func unknownCommand(app *cli.App, args []string) error {
	path, cmds := []string{"mesh"}, app.Commands
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") {
			continue
		}
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				next = c
			}
		}
		if next == nil {
			where := strings.Join(path, " ")
			return usagef("%q is not a command of %s: see %s --help", a, where, where)
		}
		path, cmds = append(path, next.Name), next.Subcommands
	}
	return usagef("no such command: see mesh --help")
}

// isFlagError recognises urfave/cli's own complaints about flags.
func isFlagError(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "flag provided but not defined") ||
		strings.HasPrefix(s, "invalid value") ||
		strings.Contains(s, "flag needs an argument") ||
		strings.HasPrefix(s, "Required flag")
}

func newApp(stdout, stderr io.Writer) *cli.App {
	app := &cli.App{
		Name:  "mesh",
		Usage: "run a fleet of your own machines",
		Description: `mesh genesis creates a mesh on this machine: the bus, the store, the CA and
the controller, and this machine's own host. Other machines join with
mesh host --join TOKEN. mesh backup and mesh restore work on the controller's
state directory, on its machine. Every other command talks to the controller
over the bus, using the operator credential in the state directory.

Flags go before arguments: mesh node show --json web1.`,
		Writer:      screenOf(stdout),
		ErrWriter:   screenOf(stderr),
		HideVersion: true,
		// mesh ... --generate-bash-completion lists what may come next:
		// the scripts of mesh completion ask it.
		EnableBashCompletion: true,
		// --set hosts=a,b is one setting whose value holds a comma.
		DisableSliceFlagSeparator: true,
		ExitErrHandler:            func(*cli.Context, error) {}, // run decides the exit code
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err.Error()}
		},
		Flags: []cli.Flag{versionFlag()},
		// mesh alone prints the help; mesh --version is mesh version.
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return unknownCommand(c.App, append([]string{c.App.Name}, c.Args().Slice()...))
			}
			if c.Bool("version") {
				return printVersion(c.App.Writer, false)
			}
			return cli.ShowAppHelp(c)
		},
		Commands: []*cli.Command{
			genesisCommand(),
			controllerCommand(),
			hostCommand(),
			tokenCommand(),
			clusterCommand(),
			nodeCommand(),
			moduleCommand(),
			assignCommands()[0],
			assignCommands()[1],
			grantCommand(),
			pushCommand(),
			statusCommand(),
			auditCommand(),
			backupCommand(),
			restoreCommand(),
			caCommand(),
			overlayCommand(),
			uiCommand(),
			releaseCommand(),
			serveCommand(),
			installCommand(),
			uninstallCommand(),
			versionCommand(),
			completionCommand(),
		},
	}
	for _, c := range app.Commands {
		guard(c)
	}
	return app
}

// guard makes every command refuse an argument that looks like a flag (urfave/cli
// stops reading flags at the first argument, so it would be taken as an
// argument silently) and a usage mistake exit 2.
func guard(c *cli.Command) {
	c.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return usageError{err.Error()} }
	if c.Action != nil {
		action := c.Action
		c.Action = func(ctx *cli.Context) error {
			args := ctx.Args().Slice()
			for i, a := range args {
				if strings.HasPrefix(a, "-") && len(a) > 1 {
					name := ctx.Command.HelpName
					if i == 0 {
						return usagef("%q is not a flag of %s: see %s --help", a, name, name)
					}
					return usagef("flag %s comes after the argument %q: flags go before arguments (%s %s)",
						a, args[0], name, strings.Join(flagsFirst(ctx.Command, args), " "))
				}
			}
			return action(ctx)
		}
	}
	for _, sub := range c.Subcommands {
		guard(sub)
	}
}

func dirFlag() cli.Flag {
	return &cli.StringFlag{
		Name:    "dir",
		Usage:   "the mesh's state directory",
		EnvVars: []string{"MESH_DIR"},
		Value:   "/var/lib/mesh",
	}
}

func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}
}

func wantArgs(c *cli.Context, n int, names string) error {
	if c.NArg() != n {
		return usagef("%s takes %s; got %d argument(s): see %s --help", c.Command.HelpName, names, c.NArg(), c.Command.HelpName)
	}
	return nil
}

// flagsFirst is args with every flag (and the value of one that takes a
// value) moved before the arguments, each group in its order: the call as
// it should have been written.
func flagsFirst(cmd *cli.Command, args []string) []string {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || len(a) == 1 {
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		for _, f := range cmd.Flags {
			if _, isBool := f.(*cli.BoolFlag); !isBool && slices.Contains(f.Names(), name) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	return append(flags, rest...)
}
