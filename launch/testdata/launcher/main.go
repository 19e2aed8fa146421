// A launcher alone, for the launcher's tests that kill it: it runs
// launch.Launcher on the state directory its first argument names, in
// the mode its second names, its own executable (the version of last
// resort) its third.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/mesh-fleet/mesh/launch"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	l, err := launch.New(launch.Config{Dir: os.Args[1], Mode: os.Args[2], Self: os.Args[3]}, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	err = l.Run(ctx)
	var exit *launch.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.Code)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
