// Package daemon runs a machine's parts in a fixed order: each started
// once the one before is ready, all stopped in reverse, the store last
// (docs/design.md, "Packages"). Mesh is a controller's machine (bus, resolver,
// controller and its own host over one store); Node is any other machine
// (resolver and host). Each is made by New, which starts nothing, and run
// by Run, which blocks until its context ends; Ready is closed once every
// part is ready and D/addrs.json says where they listen.
package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
)

// part is one long-running piece of a machine.
type part struct {
	name  string
	run   func(context.Context) error
	ready <-chan struct{}
	held  io.Closer // the address it binds, held until it starts; or nil
}

// runInOrder starts parts one by one, each once the one before is ready,
// calls started when all are, and runs until ctx ends or a part fails; then
// it stops them in reverse order, waiting for each.
func runInOrder(ctx context.Context, log *slog.Logger, parts []part, started func() error) error {
	type running struct {
		cancel context.CancelFunc
		done   chan error
	}
	var live []running
	failed := make(chan error, len(parts))
	var firstErr error
	stopAll := func() {
		for i := len(live) - 1; i >= 0; i-- {
			live[i].cancel()
			if err := <-live[i].done; err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	for _, p := range parts {
		release(p.held)
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() {
			err := p.run(pctx)
			if err != nil {
				err = fmt.Errorf("%s: %w", p.name, err)
				failed <- err
			}
			done <- err
		}()
		live = append(live, running{cancel, done})
		select {
		case <-p.ready:
		case err := <-failed:
			firstErr = err
			stopAll()
			return firstErr
		case <-ctx.Done():
			stopAll()
			return firstErr
		}
	}
	if err := started(); err != nil {
		firstErr = err
		stopAll()
		return firstErr
	}
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case err := <-failed:
		firstErr = err
	}
	stopAll()
	return firstErr
}
