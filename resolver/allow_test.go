package resolver

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/miekg/dns"
)

// TestAllowed: the source check, loopback and the Allow prefixes.
func TestAllowed(t *testing.T) {
	t.Parallel()
	lan := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00:1::/64"), netip.MustParsePrefix("::ffff:172.17.0.0/112")}
	tests := []struct {
		from     string
		loopback *bool
		allow    []netip.Prefix
		want     bool
	}{
		{"127.0.0.1", nil, nil, true},
		{"127.0.0.2", nil, nil, true},
		{"::1", nil, nil, true},
		{"::ffff:127.0.0.1", nil, nil, true},
		{"10.0.0.5", nil, nil, false},
		{"10.0.0.5", nil, lan, true},
		{"::ffff:10.0.0.5", nil, lan, true},
		{"11.0.0.5", nil, lan, false},
		{"172.17.0.2", nil, lan, true}, // a 4-in-6 prefix counts as IPv4
		{"172.18.0.2", nil, lan, false},
		{"fd00:1::7", nil, lan, true},
		{"fe80::1%eth0", nil, []netip.Prefix{netip.MustParsePrefix("fe80::/64")}, true},
		{"fd00:2::7", nil, lan, false},
		{"127.0.0.1", boolp(false), nil, false},
		{"127.0.0.1", boolp(false), []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, true},
		{"127.0.0.2", boolp(false), []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, false},
		{"127.0.0.1", boolp(true), nil, true},
		{"", nil, lan, false},
	}
	for _, tc := range tests {
		t.Run(tc.from, func(t *testing.T) {
			s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:1"}, AllowLoopback: tc.loopback, Allow: tc.allow}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var a netip.Addr
			if tc.from != "" {
				a = netip.MustParseAddr(tc.from)
			}
			if got := s.allowed(a); got != tc.want {
				t.Errorf("allowed(%s) = %v, want %v (loopback %v, allow %v)", tc.from, got, tc.want, tc.loopback, tc.allow)
			}
		})
	}
}

// TestRefusedOverTheWire: with loopback not allowed, a query from 127.0.0.1
// is REFUSED over UDP and TCP, for the mesh's names and forwarded ones alike,
// and nothing goes upstream; allowing 127.0.0.1/32 answers it.
func TestRefusedOverTheWire(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	tests := []struct {
		name  string
		allow []netip.Prefix
		rcode int
	}{
		{"loopback off", nil, dns.RcodeRefused},
		{"loopback off, another network allowed", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, dns.RcodeRefused},
		{"loopback off, 127.0.0.1/32 allowed", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, dns.RcodeSuccess},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := start(t, Config{Upstreams: []string{up.addr}, AllowLoopback: boolp(false), Allow: tc.allow}, testZone)
			before := up.count()
			for _, network := range []string{"udp", "tcp"} {
				for _, name := range []string{"alpha.internal.", "outside.example."} {
					r := ask(t, network, addr, name, dns.TypeA, 1232)
					if r.Rcode != tc.rcode {
						t.Errorf("%s %s: rcode %s, want %s", network, name, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
					}
					if tc.rcode == dns.RcodeRefused && len(r.Answer) != 0 {
						t.Errorf("%s %s: refused with an answer %v", network, name, r.Answer)
					}
					if tc.rcode == dns.RcodeSuccess && len(r.Answer) == 0 {
						t.Errorf("%s %s: allowed but no answer", network, name)
					}
				}
			}
			if went := up.count() - before; tc.rcode == dns.RcodeRefused && went != 0 {
				t.Errorf("refused queries went upstream %d times", went)
			}
		})
	}
}

// TestNew: what New refuses, and the upstreams it reads from a resolv.conf.
func TestNew(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := filepath.Join(dir, "resolv.conf")
	os.WriteFile(conf, []byte("search example\nnameserver 192.0.2.53\nnameserver 2001:db8::53\n"), 0o644)
	empty := filepath.Join(dir, "empty.conf")
	os.WriteFile(empty, []byte("search example\n"), 0o644)
	tests := []struct {
		name      string
		cfg       Config
		err       string // "" for none
		upstreams []string
	}{
		{"no listen", Config{Upstreams: []string{"127.0.0.1:1"}}, "no listen address", nil},
		{"listen not host:port", Config{Listen: []string{"127.0.0.1"}, Upstreams: []string{"127.0.0.1:1"}}, `listen address "127.0.0.1"`, nil},
		{"listen host a name", Config{Listen: []string{"localhost:53"}, Upstreams: []string{"127.0.0.1:1"}}, "not an IP address", nil},
		{"bad upstream", Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"dns.example:53"}}, `upstream "dns.example:53"`, nil},
		{"upstream is itself", Config{Listen: []string{"127.0.0.1:5353"}, Upstreams: []string{"127.0.0.1:5353"}}, "own listen address", nil},
		{"upstream is itself, wildcard", Config{Listen: []string{"0.0.0.0:5353"}, Upstreams: []string{"127.0.0.1:5353"}}, "own listen address", nil},
		{"bad domain", Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:1"}, Domain: "a..b"}, "domain", nil},
		{"negative cache", Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:1"}, CacheSize: -1}, "cache size", nil},
		{"no resolv.conf", Config{Listen: []string{"127.0.0.1:0"}, ResolvConf: filepath.Join(dir, "none")}, "none", nil},
		{"empty resolv.conf", Config{Listen: []string{"127.0.0.1:0"}, ResolvConf: empty}, "no nameserver in " + empty, nil},
		{"resolv.conf", Config{Listen: []string{"127.0.0.1:0"}, ResolvConf: conf}, "", []string{"192.0.2.53:53", "[2001:db8::53]:53"}},
		{"upstream without port", Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{"192.0.2.1", "[::1]:5300"}}, "", []string{"192.0.2.1:53", "[::1]:5300"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.cfg, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("New: %v, want an error with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(s.fwd.upstreams, " ") != strings.Join(tc.upstreams, " ") {
				t.Errorf("upstreams %v, want %v", s.fwd.upstreams, tc.upstreams)
			}
		})
	}
}

// TestRun: port 0 binds UDP and TCP on one port, each listen address is
// served, a taken address is an error naming it, and Run ends with ctx.
func TestRun(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	s, _ := start(t, Config{Listen: []string{"127.0.0.1:0", "[::1]:0"}, Upstreams: []string{up.addr}}, testZone)
	got := s.Addrs()
	if len(got) != 2 || !strings.HasPrefix(got[0], "127.0.0.1:") || !strings.HasPrefix(got[1], "[::1]:") {
		t.Fatalf("Addrs %v, want 127.0.0.1:port and [::1]:port", got)
	}
	for _, a := range got {
		for _, network := range []string{"udp", "tcp"} {
			if r := ask(t, network, a, "alpha.internal.", dns.TypeA, 0); len(r.Answer) != 2 {
				t.Errorf("%s %s: answer %v", network, a, r.Answer)
			}
		}
	}

	// A wildcard address is served by miekg/dns's UDP server, the same.
	w, _ := start(t, Config{Listen: []string{"0.0.0.0:0"}, Upstreams: []string{up.addr}}, testZone)
	wa := w.Addrs()[0]
	if !strings.HasPrefix(wa, "0.0.0.0:") {
		t.Fatalf("Addrs %v, want 0.0.0.0:port", w.Addrs())
	}
	_, port, _ := net.SplitHostPort(wa)
	for _, network := range []string{"udp", "tcp"} {
		if r := ask(t, network, "127.0.0.1:"+port, "alpha.internal.", dns.TypeA, 0); len(r.Answer) != 2 {
			t.Errorf("%s on %s: answer %v", network, wa, r.Answer)
		}
		if r := ask(t, network, "127.0.0.1:"+port, "www.example.com.", dns.TypeA, 0); len(r.Answer) != 1 {
			t.Errorf("%s on %s: forwarded answer %v", network, wa, r.Answer)
		}
	}

	// The UDP port is free but TCP's is taken, then the other way round.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	busyUDP, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyUDP.Close()
	for _, addr := range []string{taken.Addr().String(), busyUDP.LocalAddr().String()} {
		s, err := New(Config{Listen: []string{"127.0.0.1:0", addr}, Upstreams: []string{up.addr}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = s.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), addr) {
			t.Errorf("Run on taken %s: %v, want an error naming it", addr, err)
		}
		select {
		case <-s.Ready():
			t.Error("Ready closed after a bind failure")
		default:
		}
	}

	// Run ends when ctx does, and unbinds. The port is one the test holds
	// (testport): one the kernel chose may be another process's by the
	// time the test binds it again.
	s2, err := New(Config{Listen: []string{testport.Addr(t, "127.0.0.1")}, Upstreams: []string{up.addr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s2.Run(ctx) }()
	<-s2.Ready()
	bound := s2.Addrs()[0]
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	for _, network := range []string{"udp", "tcp"} {
		if network == "udp" {
			pc, err := net.ListenPacket("udp", bound)
			if err != nil {
				t.Errorf("udp %s still bound after Run: %v", bound, err)
				continue
			}
			pc.Close()
		} else {
			l, err := net.Listen("tcp", bound)
			if err != nil {
				t.Errorf("tcp %s still bound after Run: %v", bound, err)
				continue
			}
			l.Close()
		}
	}
	if err := s2.Run(context.Background()); err == nil {
		t.Error("a second Run started")
	}
}

// TestWildcardBindsBothFamilies: 0.0.0.0 and :: each answer IPv4 and IPv6
// queries, over UDP and TCP, and Addrs keeps the wildcard asked for (the
// trial's controller bound [::] only and refused every IPv4 query).
func TestWildcardBindsBothFamilies(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(60))
	for _, listen := range []string{"0.0.0.0:0", "[::]:0"} {
		s, _ := start(t, Config{Listen: []string{listen}, Upstreams: []string{up.addr}}, testZone)
		got := s.Addrs()[0]
		host, port, _ := net.SplitHostPort(got)
		if wantHost, _, _ := net.SplitHostPort(listen); host != wantHost {
			t.Fatalf("listen %s: Addrs %v, want the wildcard asked for", listen, s.Addrs())
		}
		for _, to := range []string{"127.0.0.1", "::1"} {
			for _, network := range []string{"udp", "tcp"} {
				if r := ask(t, network, net.JoinHostPort(to, port), "alpha.internal.", dns.TypeA, 0); len(r.Answer) != 2 {
					t.Errorf("listen %s, %s to %s: answer %v", listen, network, to, r.Answer)
				}
			}
		}
	}
}
