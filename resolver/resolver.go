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
// upstream once. An upstream's answer is scrubbed before it is cached or
// passed on (RFC 5452 §6, see scrub): the answer keeps the question's name
// and its CNAME and DNAME chain, the authority a negative answer's SOA and
// the DNSSEC proofs, never an NS; the additional section goes; and no
// record of a name the mesh answers for is ever taken from an upstream.
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
	"sync"
	"sync/atomic"
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
	// HandOver, when set, is given the sockets of the addresses Attach
	// bound, with their allowed prefixes, as Run ends and before it closes
	// them: a launcher keeps copies, and hands them to the next process as
	// Held with Allow set, so that those addresses stay bound too while
	// one process stands aside for the next. It must not close them.
	HandOver func([]Held)
	// Latency, when set, is given each query's time to answer, in
	// seconds: from the packet's read (a query's start, over TCP or a
	// wildcard address) to its answer's write. A prometheus.Histogram is
	// one.
	Latency Observer
}

// Observer takes a value in seconds; the resolver calls it from every
// goroutine that answers, so it must be safe for concurrent use.
type Observer interface {
	Observe(seconds float64)
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
		if !h.Allow.IsValid() && !slices.Contains(cfg.Listen, h.Addr) {
			return nil, fmt.Errorf("resolver: sockets held for %s, which is no listen address", h.Addr)
		}
		if _, ok := h.UDP.(*net.UDPConn); !ok || h.TCP == nil {
			return nil, fmt.Errorf("resolver: the sockets held for %s are not a UDP socket and a TCP listener", h.Addr)
		}
	}

	if err := setUpstreams(&cfg, listen); err != nil {
		return nil, err
	}

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
	s.fwd.own = s.ownName
	s.allow.Store(&allow)
	s.SetZone(Zone{})
	return s, nil
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

// setUpstreams sets cfg.Upstreams to the upstreams it gives, as
// addresses, or to the nameservers of ResolvConf when it gives none. None
// may be one of the listen addresses: the resolver would ask itself.
func setUpstreams(cfg *Config, listen []netip.AddrPort) error {
	ups := cfg.Upstreams
	if len(ups) == 0 {
		if cfg.ResolvConf == "" {
			cfg.ResolvConf = DefaultResolvConf
		}
		rc, err := dns.ClientConfigFromFile(cfg.ResolvConf)
		if err != nil {
			return fmt.Errorf("resolver upstreams: read %s: %w", cfg.ResolvConf, err)
		}
		for _, s := range rc.Servers {
			ups = append(ups, net.JoinHostPort(s, rc.Port))
		}
		if len(ups) == 0 {
			return fmt.Errorf("resolver upstreams: no nameserver in %s (give upstreams explicitly)", cfg.ResolvConf)
		}
	}
	upstreams := make([]string, 0, len(ups))
	for _, u := range ups {
		ap, err := parseUpstream(u)
		if err != nil {
			return err
		}
		for _, l := range listen {
			if asksItself(l, ap) {
				return fmt.Errorf("resolver upstream %s: is this resolver's own listen address (it would ask itself)", u)
			}
		}
		upstreams = append(upstreams, ap.String())
	}
	cfg.Upstreams = upstreams
	return nil
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

// Run binds every listen address, UDP then TCP on the port UDP got, serves
// until ctx ends, then shuts down, the addresses Attach added included. A
// bind failure is an error naming the address, and nothing stays bound.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("resolver: already run")
	}
	listen, attach := splitHeld(s.cfg.Held)
	ls, err := bindListeners(s.cfg.Listen, listen, s)
	if err != nil {
		s.end()
		closeHeld(attach)
		return err
	}
	// The prefixes the held attachments allow are allowed before a query
	// waiting in a held socket is read: it was sent when they were.
	s.attachMu.Lock()
	for _, h := range attach {
		s.addAllow(normalPrefix(h.Allow))
	}
	s.attachMu.Unlock()
	failed := make(chan error, 1)
	started := s.serve(ls, failed)
	for range ls.servers {
		select {
		case <-started:
		case err := <-failed:
			s.end()
			closeHeld(attach)
			shutdown(s.cfg.Timeout, ls)
			return err
		case <-ctx.Done():
			s.end()
			closeHeld(attach)
			shutdown(s.cfg.Timeout, ls)
			return nil
		}
	}
	stop := make(chan struct{})
	s.mu.Lock()
	s.state, s.addrs, s.bound, s.failed, s.stop = runServing, ls.addrs, ls.bound, failed, stop
	s.mu.Unlock()
	s.attachHeld(attach)
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

// end marks Run ended, so that Attach binds nothing more and Detach finds
// nothing, and hands over the listeners Attach added: to HandOver first,
// when it is set, then to the caller, which shuts them down.
func (s *Server) end() []*listeners {
	s.mu.Lock()
	s.state = runEnded
	var bound []*listeners
	var handed []Held
	for _, a := range s.attached {
		if a.ls != nil {
			bound = append(bound, a.ls)
			handed = append(handed, Held{Addr: a.ls.addrs[0], Allow: a.allow, UDP: a.ls.pcs[0], TCP: a.ls.tcps[0]})
		}
	}
	s.attached = nil
	s.mu.Unlock()
	if s.cfg.HandOver != nil && len(handed) > 0 {
		s.cfg.HandOver(handed)
	}
	return bound
}
