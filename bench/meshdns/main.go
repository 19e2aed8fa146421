// Command meshdns serves the mesh's resolver alone, for bench/dns.sh: the
// 1,000 names n0000.internal to n0999.internal (10.9.0.0 to 10.9.3.231) on
// one address, forwarding anything else to an upstream that should not
// answer, so nothing leaves the machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/mesh-fleet/mesh/resolver"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:5300", "address to serve, host:port (UDP and TCP)")
	upstream := flag.String("upstream", "127.0.0.1:9", "upstream for names outside the zone (keep it a dead loopback port)")
	names := flag.Int("names", 1000, "how many names nNNNN.internal to serve")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "meshdns:", err)
			os.Exit(2)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := resolver.New(resolver.Config{Listen: []string{*listen}, Upstreams: []string{*upstream}}, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshdns:", err)
		os.Exit(2)
	}
	z := resolver.Zone{Names: map[string][]netip.Addr{}}
	for i := range *names {
		z.Names[fmt.Sprintf("n%04d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)})}
	}
	s.SetZone(z)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		select {
		case <-s.Ready():
			fmt.Println("ready", s.Addrs()[0])
		case <-ctx.Done():
		}
	}()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "meshdns:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
