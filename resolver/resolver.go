// Package resolver is the machine's DNS server: it answers the mesh's own
// names from the zone it was last given (swapped in whole, never seen half
// made) and forwards every other name to upstream resolvers through a
// bounded cache.
//
// It imports the standard library and github.com/miekg/dns only; the host
// turns its roster into a Zone and calls SetZone.
//
// What it answers, and the choices made where the RFCs leave one:
//
//   - Authoritative (AA set) for Domain and every name under it, and for each
//     other name the zone holds (a public name served in the mesh: split
//     horizon, the zone's answer and never the upstream's). A and AAAA come
//     from the zone's addresses; another type, or a name with no address of
//     the type asked, is NODATA (NOERROR, no answer, the SOA in authority); a
//     name under Domain that the zone does not hold is NXDOMAIN with the SOA,
//     except the names between Domain and a held name (empty non-terminals,
//     RFC 8020), which are NODATA.
//   - The SOA is Domain's for every name under Domain. A public name is given
//     an SOA of its own, owned by the name itself (a zone of exactly that
//     name): an SOA at its parent would claim that this resolver speaks for
//     the parent's other names, which it forwards.
//   - ANY is answered per RFC 8482 with one synthesized HINFO record
//     ("RFC8482", "") for a held name, NODATA for an empty non-terminal.
//   - A class other than IN is NOTIMP; AXFR and IXFR are REFUSED.
//   - UDP answers fit the client's EDNS0 buffer size (512 without EDNS0, at
//     most 4096); a larger one is cut to fit and has TC set. An OPT in the
//     question gets one in the answer (DO copied); EDNS version above 0 gets
//     BADVERS.
//   - Sources other than loopback and the Allow prefixes (and those Attach
//     added) get REFUSED.
//
// Forwarding: each upstream query has a fresh random ID from crypto/rand and
// its own UDP socket, so a port the kernel picks at random; an answer whose
// ID, or question (name, type, class), differs from the query is dropped and
// the socket keeps listening for the real one until the attempt's timeout,
// then the next upstream is tried; when none answers, the client gets
// SERVFAIL. An upstream answering other than NOERROR or NXDOMAIN counts as
// not answering, and SERVFAIL is never cached. A truncated upstream answer is
// asked again over TCP. Identical queries in flight at once are sent
// upstream once.
//
// Serving: TCP on every listen address, and UDP on a wildcard one, by
// miekg/dns's server; UDP on an address with a host by the resolver's own
// loop, which answers a plain query for the mesh's names, or one the cache
// holds, from the packet's bytes without allocating, and gives any other to
// ServeDNS (see udp.go). Both give the same bytes for the same query. Attach
// adds an address at run time (a bridge network's gateway, say), served the
// same way until Run ends or Detach takes it away.
//
// The cache holds CacheSize answers, keyed by name, type, class and the DO
// and CD bits, and evicts with the clock algorithm (a referenced bit set on
// each hit, cleared by the sweeping hand; an expired entry goes first). An
// entry lives for the smallest TTL of its records (at most a day); a negative
// answer (NXDOMAIN, or NOERROR with no answer) for min(SOA TTL, SOA minimum)
// per RFC 2308 (at most three hours), and is not cached without an SOA. The
// TTLs handed out count down from the ones received.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// Defaults of Config's fields.
const (
	DefaultDomain     = "internal"
	DefaultCacheSize  = 10000
	DefaultTTL        = 5
	DefaultTimeout    = 2 * time.Second
	DefaultResolvConf = "/etc/resolv.conf"
)

// Config is what the resolver needs to start.
type Config struct {
	// Listen is host:port each; the resolver serves UDP and TCP on each, on
	// the same port. Port 0 takes a free port (UDP's, then TCP on it).
	Listen []string
	// Upstreams are host:port (port 53 if left out) of the resolvers asked
	// for names outside the mesh. Empty: the nameservers of ResolvConf, read
	// by New.
	Upstreams []string
	// ResolvConf is read only when Upstreams is empty; default
	// /etc/resolv.conf.
	ResolvConf string
	// Allow are the sources allowed besides loopback; others get REFUSED.
	Allow []netip.Prefix
	// AllowLoopback allows loopback sources (127.0.0.0/8, ::1); nil means
	// true.
	AllowLoopback *bool
	// Domain is the mesh's own domain; default "internal".
	Domain string
	// CacheSize is how many forwarded answers the cache holds; default 10000.
	CacheSize int
	// TTL is the TTL of the mesh's own answers, seconds; default 5.
	TTL uint32
	// Timeout bounds one attempt at one upstream; default 2s.
	Timeout time.Duration
	// Held are sockets bound before (by Bind) for Listen addresses: each is
	// served instead of its address being bound, and closed when Run ends.
	// A launcher binds the machine's resolver address and hands each child
	// copies, keeping its own: the address stays bound while one child
	// stands aside for the next, and a query sent meanwhile waits in the
	// socket for the next to answer.
	Held []Held
}

// Held is a Listen address's sockets, bound by Bind.
type Held struct {
	Addr string // as in Listen
	UDP  net.PacketConn
	TCP  net.Listener
}

// Bind binds a as Run binds a Listen address: UDP, then TCP on the port UDP
// got; an IPv4 address IPv4 only, an IPv6 one IPv6 only, a wildcard both.
func Bind(a string) (net.PacketConn, net.Listener, error) {
	if _, _, err := parseListen(a); err != nil {
		return nil, nil, fmt.Errorf("resolver listen address %q: %w", a, err)
	}
	return bind(a)
}

// Zone is the mesh's names: a name (fully qualified or not, any case) to its
// addresses. A name under the mesh's domain is a node or a route; any other
// name is a public name served in the mesh.
type Zone struct {
	Names map[string][]netip.Addr
}

// Server is the resolver. It answers through ServeDNS, which Run's
// listeners call and which is usable on its own (a dns.Handler).
type Server struct {
	cfg      Config
	listen   []netip.AddrPort // cfg.Listen, parsed
	log      *slog.Logger
	domain   string // canonical: lower case, fully qualified
	loopback bool
	ready    chan struct{}
	running  atomic.Bool

	zone atomic.Pointer[zoneData]
	gen  atomic.Uint32 // the SOA serial of the next zone

	fwd *forwarder

	// allow is Config.Allow and the prefixes Attach added: swapped whole
	// (under attachMu), read without a lock by allowed.
	allow atomic.Pointer[[]netip.Prefix]

	attachMu sync.Mutex // one Attach at a time

	mu       sync.Mutex    // guards the fields below
	state    runState      // where Run is
	addrs    []string      // bound, host:port: the Listen ones, then Attach's
	bound    []boundAddr   // addrs, parsed: what Attach compares with
	attached []attachment  // Attach's, in order; their listeners shut down with Run's
	failed   chan error    // Run's: the first error a server ends with
	stop     chan struct{} // closed when Run begins to shut down
}

// runState is where Run is: Attach serves only while it is serving.
type runState int

const (
	runIdle    runState = iota // Run not called, or not ready yet
	runServing                 // Ready closed, shutdown not begun
	runEnded                   // shutting down or returned
)

// New checks cfg, reads ResolvConf when no upstream is given, and starts
// nothing. The zone is empty until SetZone: names under Domain are NXDOMAIN,
// never forwarded.
func New(cfg Config, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Listen) == 0 {
		return nil, errors.New("resolver: no listen address")
	}
	listen := make([]netip.AddrPort, 0, len(cfg.Listen))
	for _, a := range cfg.Listen {
		ap, _, err := parseListen(a)
		if err != nil {
			return nil, fmt.Errorf("resolver listen address %q: %w", a, err)
		}
		listen = append(listen, ap)
	}
	for _, h := range cfg.Held {
		if !slices.Contains(cfg.Listen, h.Addr) {
			return nil, fmt.Errorf("resolver: sockets held for %s, which is no listen address", h.Addr)
		}
		if _, ok := h.UDP.(*net.UDPConn); !ok || h.TCP == nil {
			return nil, fmt.Errorf("resolver: the sockets held for %s are not a UDP socket and a TCP listener", h.Addr)
		}
	}

	ups := cfg.Upstreams
	if len(ups) == 0 {
		if cfg.ResolvConf == "" {
			cfg.ResolvConf = DefaultResolvConf
		}
		rc, err := dns.ClientConfigFromFile(cfg.ResolvConf)
		if err != nil {
			return nil, fmt.Errorf("resolver upstreams: read %s: %w", cfg.ResolvConf, err)
		}
		for _, s := range rc.Servers {
			ups = append(ups, net.JoinHostPort(s, rc.Port))
		}
		if len(ups) == 0 {
			return nil, fmt.Errorf("resolver upstreams: no nameserver in %s (give upstreams explicitly)", cfg.ResolvConf)
		}
	}
	upstreams := make([]string, 0, len(ups))
	for _, u := range ups {
		ap, err := parseUpstream(u)
		if err != nil {
			return nil, err
		}
		for _, l := range listen {
			if asksItself(l, ap) {
				return nil, fmt.Errorf("resolver upstream %s: is this resolver's own listen address (it would ask itself)", u)
			}
		}
		upstreams = append(upstreams, ap.String())
	}
	cfg.Upstreams = upstreams

	for _, p := range cfg.Allow {
		if !p.IsValid() {
			return nil, fmt.Errorf("resolver allowed network %q: not a valid prefix", p)
		}
	}
	allow := make([]netip.Prefix, len(cfg.Allow))
	for i, p := range cfg.Allow {
		allow[i] = normalPrefix(p)
	}
	cfg.Allow = allow

	if cfg.Domain == "" {
		cfg.Domain = DefaultDomain
	}
	domain, err := canonicalName(cfg.Domain)
	if err != nil || domain == "." {
		return nil, fmt.Errorf("resolver domain %q: not a domain name", cfg.Domain)
	}
	if cfg.CacheSize < 0 {
		return nil, fmt.Errorf("resolver cache size %d: negative", cfg.CacheSize)
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("resolver upstream timeout %s: negative", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}

	s := &Server{
		cfg:      cfg,
		listen:   listen,
		log:      log,
		domain:   domain,
		loopback: cfg.AllowLoopback == nil || *cfg.AllowLoopback,
		ready:    make(chan struct{}),
		fwd:      newForwarder(cfg.Upstreams, cfg.CacheSize, cfg.Timeout),
	}
	s.allow.Store(&allow)
	s.SetZone(Zone{})
	return s, nil
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

// asksItself says whether upstream up is listen address l (a wildcard
// covering loopback).
func asksItself(l, up netip.AddrPort) bool {
	return l.Port() != 0 && l.Port() == up.Port() && (l.Addr() == up.Addr().Unmap() || l.Addr().IsUnspecified() && up.Addr().IsLoopback())
}

// normalPrefix is p masked, a 4-in-6 prefix as IPv4.
func normalPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// parseUpstream reads host:port, or an address alone for port 53.
func parseUpstream(u string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(u); err == nil {
		return ap, nil
	}
	if a, err := netip.ParseAddr(u); err == nil {
		return netip.AddrPortFrom(a, 53), nil
	}
	return netip.AddrPort{}, fmt.Errorf("resolver upstream %q: want an IP address and port, e.g. 192.0.2.53:53", u)
}

// Ready is closed once every listener is bound and serving.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addrs are the addresses bound, host:port, one per listen address (UDP and
// TCP share it), then one per address Attach bound, in the order attached.
// Empty before Ready.
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.addrs...)
}

// listeners are addresses bound and the servers that serve them: Run's
// Listen addresses, or one Attach's address.
type listeners struct {
	addrs   []string    // as bound, host:port
	bound   []boundAddr // addrs, parsed
	servers []*dns.Server
	own     []*net.UDPConn // UDP served by serveUDP
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
		ls.addrs = append(ls.addrs, asBound(a, pc))
		ap := pc.LocalAddr().(*net.UDPAddr).AddrPort()
		ls.bound = append(ls.bound, boundAddr{netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), dual})
		if want.Addr().IsUnspecified() {
			ls.servers = append(ls.servers, &dns.Server{PacketConn: pc, Handler: h, UDPSize: maxUDPSize})
		} else {
			ls.own = append(ls.own, pc.(*net.UDPConn))
		}
		ls.servers = append(ls.servers, &dns.Server{Listener: l, Handler: h, ReadTimeout: 5 * time.Second, MaxTCPQueries: -1})
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

// Run binds every listen address, UDP then TCP on the port UDP got, serves
// until ctx ends, then shuts down, the addresses Attach added included. A
// bind failure is an error naming the address, and nothing stays bound.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("resolver: already run")
	}
	ls, err := bindListeners(s.cfg.Listen, s.cfg.Held, s)
	if err != nil {
		s.end()
		return err
	}
	failed := make(chan error, 1)
	started := s.serve(ls, failed)
	for range ls.servers {
		select {
		case <-started:
		case err := <-failed:
			s.end()
			shutdown(s.cfg.Timeout, ls)
			return err
		case <-ctx.Done():
			s.end()
			shutdown(s.cfg.Timeout, ls)
			return nil
		}
	}
	stop := make(chan struct{})
	s.mu.Lock()
	s.state, s.addrs, s.bound, s.failed, s.stop = runServing, ls.addrs, ls.bound, failed, stop
	s.mu.Unlock()
	close(s.ready)
	s.log.Info("resolver ready", "addrs", ls.addrs, "upstreams", s.cfg.Upstreams, "domain", s.domain)

	select {
	case <-ctx.Done():
	case err = <-failed:
	}
	close(stop) // an Attach waiting for its servers gives up
	attached := s.end()
	shutdown(s.cfg.Timeout, append([]*listeners{ls}, attached...)...)
	addrs := s.Addrs()
	if err != nil {
		s.log.Error("resolver stopped", "addrs", addrs, "err", err)
		return err
	}
	s.log.Info("resolver stopped", "addrs", addrs)
	return nil
}

// attachment is one Attach that succeeded: the address it serves (as
// bound, so port 0 is the port the kernel gave), the listeners it bound
// (nil when an address already bound served it) and the prefix it allowed.
type attachment struct {
	at    netip.AddrPort
	ls    *listeners
	allow netip.Prefix
}

// end marks Run ended, so that Attach binds nothing more and Detach finds
// nothing, and hands over the listeners Attach added.
func (s *Server) end() []*listeners {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = runEnded
	var bound []*listeners
	for _, a := range s.attached {
		if a.ls != nil {
			bound = append(bound, a.ls)
		}
	}
	s.attached = nil
	return bound
}

// Attach serves addr (host:port) too, until Run ends, and answers queries
// from allow besides the sources Config allows. Attaching an address already
// served (by Listen or an earlier Attach) only adds allow. It may be called
// only after Ready; a bind failure is an error naming the address, and
// nothing stays bound.
//
// addr is served as a Listen address is: UDP and TCP on one port, port 0
// taking a free one (Addrs reports it). It counts as served when an address
// bound has the same host (compared unmapped) and port, or is a wildcard of
// its family on its port; a port 0 never is, and binds a new port each time.
// An allow already held is not added twice.
func (s *Server) Attach(addr string, allow netip.Prefix) error {
	want, dual, err := parseListen(addr)
	if err != nil {
		return fmt.Errorf("resolver attach address %q: %w", addr, err)
	}
	if !allow.IsValid() {
		return fmt.Errorf("resolver attach %s: allowed network %q: not a valid prefix", addr, allow)
	}
	allow = normalPrefix(allow)
	for _, u := range s.cfg.Upstreams {
		if up, err := netip.ParseAddrPort(u); err == nil && asksItself(want, up) {
			return fmt.Errorf("resolver attach %s: is upstream %s (it would ask itself)", addr, u)
		}
	}

	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	s.mu.Lock()
	state, failed, stop := s.state, s.failed, s.stop
	served := false
	for _, b := range s.bound {
		served = served || b.serves(want, dual)
	}
	s.mu.Unlock()
	switch state {
	case runIdle:
		return fmt.Errorf("resolver attach %s: resolver not ready", addr)
	case runEnded:
		return fmt.Errorf("resolver attach %s: resolver stopped", addr)
	}
	if served {
		s.mu.Lock()
		if s.state == runServing {
			s.attached = append(s.attached, attachment{at: want, allow: allow})
		}
		s.mu.Unlock()
		s.addAllow(allow)
		return nil
	}

	ls, err := bindListeners([]string{addr}, nil, s)
	if err != nil {
		return err
	}
	// Allowed before its first query is read, and taken back on failure.
	before := s.addAllow(allow)
	undo := func() {
		shutdown(s.cfg.Timeout, ls)
		s.allow.Store(before)
	}
	started := s.serve(ls, failed)
	for range ls.servers {
		select {
		case <-started:
		case <-stop:
			undo()
			return fmt.Errorf("resolver attach %s: resolver stopped", addr)
		}
	}
	s.mu.Lock()
	if s.state != runServing {
		s.mu.Unlock()
		undo()
		return fmt.Errorf("resolver attach %s: resolver stopped", addr)
	}
	s.attached = append(s.attached, attachment{at: ls.bound[0].ap, ls: ls, allow: allow})
	s.addrs = append(s.addrs, ls.addrs...)
	s.bound = append(s.bound, ls.bound...)
	s.mu.Unlock()
	s.log.Info("resolver attached", "addr", ls.addrs[0], "allow", allow)
	return nil
}

// Detach stops serving addr (host:port), which an earlier Attach added, and
// stops answering the prefixes only Attach calls at addr allowed: the
// addresses it bound are unbound (UDP and TCP) before it returns. addr is
// compared as Attach compares it, after an Attach of port 0 with the port
// bound (as Addrs reports it). An address no Attach added (a Listen address,
// or one never attached) is left as it is, and that is no error; so is any
// address once Run has ended. An address attached while a wildcard attached
// earlier served it goes with that wildcard.
func (s *Server) Detach(addr string) error {
	want, _, err := parseListen(addr)
	if err != nil {
		return fmt.Errorf("resolver detach address %q: %w", addr, err)
	}
	s.attachMu.Lock()
	defer s.attachMu.Unlock()
	s.mu.Lock()
	var gone []*listeners
	kept := make([]attachment, 0, len(s.attached))
	for _, a := range s.attached {
		if a.at != want {
			kept = append(kept, a)
		} else if a.ls != nil {
			gone = append(gone, a.ls)
		}
	}
	if len(kept) == len(s.attached) {
		s.mu.Unlock()
		return nil
	}
	s.attached = kept
	for _, ls := range gone {
		s.addrs = slices.DeleteFunc(s.addrs, func(a string) bool { return slices.Contains(ls.addrs, a) })
		s.bound = slices.DeleteFunc(s.bound, func(b boundAddr) bool { return slices.Contains(ls.bound, b) })
	}
	// Config's prefixes, and those the attachments left still allow.
	allow := slices.Clone(s.cfg.Allow)
	for _, a := range kept {
		if !slices.Contains(allow, a.allow) {
			allow = append(allow, a.allow)
		}
	}
	s.allow.Store(&allow)
	s.mu.Unlock()
	shutdown(s.cfg.Timeout, gone...)
	s.log.Info("resolver detached", "addr", want.String())
	return nil
}

// addAllow adds p to the allowed prefixes unless they hold it, swapping in
// a new slice, and returns the one before. The caller holds attachMu.
func (s *Server) addAllow(p netip.Prefix) (before *[]netip.Prefix) {
	before = s.allow.Load()
	if slices.Contains(*before, p) {
		return before
	}
	next := append(slices.Clip(*before), p) // a new array: readers keep theirs
	s.allow.Store(&next)
	return before
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

// allowed says whether a query from a may be answered: loopback (unless
// switched off), the Allow prefixes and those Attach added. It is on every
// query's path: lock-free and allocation-free.
func (s *Server) allowed(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() {
		return false
	}
	if s.loopback && a.IsLoopback() {
		return true
	}
	if a.Zone() != "" {
		a = a.WithZone("")
	}
	for _, p := range *s.allow.Load() {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
