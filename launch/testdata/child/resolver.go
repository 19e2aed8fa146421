package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/launch"
	"github.com/mesh-fleet/mesh/resolver"
)

// runResolver is the resolver behaviour: a resolver serving a.internal,
// with the sockets the launcher handed over, attaching D/attach's address
// as a host attaches a gateway's once it serves.
func runResolver(dir string, term chan os.Signal) {
	b, err := os.ReadFile(filepath.Join(dir, "attach"))
	if err != nil {
		note(dir, fmt.Sprintf("failed %d: %v", os.Getpid(), err))
		os.Exit(1)
	}
	at := strings.TrimSpace(string(b))
	held, handOver := launch.ChildDNS(nil)
	for _, h := range held {
		note(dir, fmt.Sprintf("given %d %s %s", os.Getpid(), h.Addr, h.Allow))
	}
	loopback := false
	s, err := resolver.New(resolver.Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:1"},
		AllowLoopback: &loopback, Held: held, HandOver: handOver}, nil)
	if err != nil {
		note(dir, fmt.Sprintf("failed %d: %v", os.Getpid(), err))
		os.Exit(1)
	}
	s.SetZone(resolver.Zone{Names: map[string][]netip.Addr{"a.internal": {netip.MustParseAddr("10.0.0.1")}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Ready():
	case err := <-done:
		note(dir, fmt.Sprintf("failed %d: %v", os.Getpid(), err))
		os.Exit(1)
	}
	if err := s.Attach(at, netip.MustParsePrefix("127.0.0.0/8")); err != nil {
		note(dir, fmt.Sprintf("failed %d: %v", os.Getpid(), err))
		os.Exit(1)
	}
	sayReady()
	self := digest()
	for {
		select {
		case sig := <-term:
			cancel()
			<-done
			note(dir, fmt.Sprintf("terminated %s %d %s", behaviour, os.Getpid(), sig))
			return
		case <-time.After(20 * time.Millisecond):
		}
		if w := wanted(dir); w != "" && w != self {
			cancel()
			<-done
			note(dir, fmt.Sprintf("aside %s %d", behaviour, os.Getpid()))
			os.Exit(75)
		}
	}
}
