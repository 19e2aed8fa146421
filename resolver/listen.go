package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Held is a Listen address's sockets, bound by Bind; or, with Allow set,
// an address an Attach bound in the process before (Config.HandOver),
// served as that Attach served it from the moment Run is ready.
type Held struct {
	Addr  string // as in Listen, or as an attached address was bound
	Allow netip.Prefix
	UDP   net.PacketConn
	TCP   net.Listener
}

// splitHeld parts held into Listen addresses' sockets and attached ones.
func splitHeld(held []Held) (listen, attach []Held) {
	for _, h := range held {
		if h.Allow.IsValid() {
			attach = append(attach, h)
		} else {
			listen = append(listen, h)
		}
	}
	return listen, attach
}

// closeHeld closes the sockets of held.
func closeHeld(held []Held) {
	for _, h := range held {
		h.UDP.Close()
		h.TCP.Close()
	}
}

// Bind binds a as Run binds a Listen address: UDP, then TCP on the port UDP
// got; an IPv4 address IPv4 only, an IPv6 one IPv6 only, a wildcard both.
func Bind(a string) (net.PacketConn, net.Listener, error) {
	if _, _, err := parseListen(a); err != nil {
		return nil, nil, fmt.Errorf("resolver listen address %q: %w", a, err)
	}
	return bind(a)
}

// parseListen reads a listen address, host:port: the host unmapped, and
// IPv6's unspecified address for an empty host. A wildcard (empty, 0.0.0.0
// or ::) binds both families (dual): a resolver on 0.0.0.0:53 that answered
// IPv6 only, or IPv4 only, would refuse half of the machine's queries.
func parseListen(a string) (ap netip.AddrPort, dual bool, err error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return netip.AddrPort{}, false, fmt.Errorf("%w (want host:port, e.g. 127.0.0.1:53)", err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, false, fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	ip := netip.IPv6Unspecified()
	if host != "" {
		if ip, err = netip.ParseAddr(host); err != nil {
			return netip.AddrPort{}, false, fmt.Errorf("host is not an IP address: %w", err)
		}
	}
	ip = ip.Unmap()
	return netip.AddrPortFrom(ip, uint16(p)), ip.IsUnspecified(), nil
}

// listeners are addresses bound and the servers that serve them: Run's
// Listen addresses, or one Attach's address.
type listeners struct {
	addrs   []string    // as bound, host:port
	bound   []boundAddr // addrs, parsed
	servers []*dns.Server
	pcs     []net.PacketConn // each address's UDP socket
	tcps    []net.Listener   // and TCP listener
	drains  []*drainListener // the TCP listeners served
	own     []*net.UDPConn   // UDP served by serveUDP
	closers []func()
	udp     sync.WaitGroup // serveUDP's goroutines
	// stopping makes serveUDP's readers return at their read deadline.
	stopping atomic.Bool
}

// boundAddr is an address bound: the port the kernel gave for port 0, and
// whether an empty host bound both families.
type boundAddr struct {
	ap   netip.AddrPort
	dual bool
}

// serves says whether b already serves want (a port 0 never is): the same
// address, or a wildcard of its family on its port.
func (b boundAddr) serves(want netip.AddrPort, dual bool) bool {
	switch {
	case want.Port() == 0 || want.Port() != b.ap.Port():
		return false
	case b.dual:
		return true // an empty host binds both families
	case dual:
		return false // both families asked, one bound
	case b.ap.Addr() == want.Addr():
		return true
	case b.ap.Addr() == netip.IPv4Unspecified():
		return want.Addr().Is4()
	case b.ap.Addr() == netip.IPv6Unspecified():
		return want.Addr().Is6() // bound IPv6 only
	}
	return false
}

// bindListeners binds each address, UDP then TCP on the port UDP got, and
// makes the servers that will serve it: miekg/dns's for TCP and for UDP on
// a wildcard address, serveUDP for UDP on an address with a host. A bind
// failure is an error naming the address, and nothing stays bound.
func bindListeners(addrs []string, held []Held, h dns.Handler) (*listeners, error) {
	ls := &listeners{}
	for _, a := range addrs {
		want, dual, err := parseListen(a)
		if err != nil {
			ls.close()
			return nil, fmt.Errorf("resolver listen address %q: %w", a, err)
		}
		var pc net.PacketConn
		var l net.Listener
		if i := slices.IndexFunc(held, func(h Held) bool { return h.Addr == a }); i >= 0 {
			pc, l = held[i].UDP, held[i].TCP
		} else if pc, l, err = bind(a); err != nil {
			ls.close()
			return nil, err
		}
		ls.closers = append(ls.closers, func() { pc.Close() }, func() { l.Close() })
		ls.pcs, ls.tcps = append(ls.pcs, pc), append(ls.tcps, l)
		ls.addrs = append(ls.addrs, asBound(a, pc))
		ap := pc.LocalAddr().(*net.UDPAddr).AddrPort()
		ls.bound = append(ls.bound, boundAddr{netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), dual})
		if want.Addr().IsUnspecified() {
			ls.servers = append(ls.servers, &dns.Server{PacketConn: pc, Handler: h, UDPSize: maxUDPSize})
		} else {
			ls.own = append(ls.own, pc.(*net.UDPConn))
		}
		dl := newDrainListener(l)
		ls.drains = append(ls.drains, dl)
		ls.servers = append(ls.servers, &dns.Server{Listener: dl, Handler: h, ReadTimeout: 5 * time.Second, MaxTCPQueries: -1})
	}
	return ls, nil
}

// serve serves ls: its own UDP loops at once, and its servers on goroutines
// of their own; each server's start is sent to started, and an error one
// ends with to failed unless failed holds one already.
func (s *Server) serve(ls *listeners, failed chan error) (started <-chan struct{}) {
	for _, pc := range ls.own {
		s.serveUDP(pc, &ls.udp, &ls.stopping)
	}
	st := make(chan struct{}, len(ls.servers))
	for _, srv := range ls.servers {
		var addr net.Addr
		if srv.PacketConn != nil {
			addr = srv.PacketConn.LocalAddr()
		} else {
			addr = srv.Listener.Addr()
		}
		srv.NotifyStartedFunc = func() { st <- struct{}{} }
		go func() {
			if err := srv.ActivateAndServe(); err != nil {
				select {
				case failed <- fmt.Errorf("serve resolver on %s: %w", addr, err):
				default:
				}
			}
		}()
	}
	return st
}

// shutdown stops the servers of every ls (in-flight TCP queries get until
// the upstream timeout, and 3s more), stops its UDP loops reading and
// waits for them to answer what they read, then closes the sockets.
func shutdown(timeout time.Duration, all ...*listeners) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+3*time.Second)
	defer cancel()
	// A TCP connection accepted is answered before it closes; one not
	// accepted waits in the socket, for the next process.
	deadline, _ := ctx.Deadline()
	for _, ls := range all {
		for _, d := range ls.drains {
			d.drain(deadline)
		}
	}
	for _, ls := range all {
		for _, srv := range ls.servers {
			srv.ShutdownContext(ctx) // errors only when it never started
		}
	}
	// UDP read by the resolver's own loops is answered before its socket
	// closes: the readers stop at a deadline, what they read is answered,
	// then the socket goes. A query not read stays in the socket, for the
	// next process a launcher hands it to.
	for _, ls := range all {
		ls.stopping.Store(true)
		for _, pc := range ls.own {
			pc.SetReadDeadline(time.Now())
		}
	}
	for _, ls := range all {
		ls.udp.Wait()
	}
	for _, ls := range all {
		ls.close()
	}
}

// close closes ls's sockets.
func (ls *listeners) close() {
	for _, c := range ls.closers {
		c()
	}
}

// asBound is listen address a as bound: its host as asked (a wildcard
// stays the wildcard asked, not the [::] of a dual-stack socket) and the
// port the kernel gave.
func asBound(a string, pc net.PacketConn) string {
	host, _, _ := net.SplitHostPort(a)
	if host == "" {
		return pc.LocalAddr().String()
	}
	return net.JoinHostPort(host, strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))
}

// bind binds UDP on a, then TCP on the port UDP got. With port 0, a TCP port
// that is taken has UDP try another port.
func bind(a string) (net.PacketConn, net.Listener, error) {
	host, port, _ := net.SplitHostPort(a)
	// An IPv4 address binds IPv4 only, an IPv6 one IPv6 only; a wildcard
	// binds both (Go makes an unspecified address a dual-stack socket).
	suffix := ""
	if ip, err := netip.ParseAddr(host); err == nil && !ip.IsUnspecified() {
		suffix = "6"
		if ip.Is4() {
			suffix = "4"
		}
	}
	for try := 0; ; try++ {
		pc, err := net.ListenPacket("udp"+suffix, a)
		if err != nil {
			return nil, nil, fmt.Errorf("bind resolver address %s (udp): %w", a, err)
		}
		ta := net.JoinHostPort(host, strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port))
		l, err := net.Listen("tcp"+suffix, ta)
		if err == nil {
			return pc, l, nil
		}
		pc.Close()
		if port != "0" || try == 15 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, fmt.Errorf("bind resolver address %s (tcp): %w", ta, err)
		}
	}
}
