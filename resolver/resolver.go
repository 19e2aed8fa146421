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
//   - Sources other than loopback and the Allow prefixes get REFUSED.
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
// ServeDNS (see udp.go). Both give the same bytes for the same query.
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
	"strconv"
	"strings"
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

	mu    sync.Mutex
	addrs []string
}

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
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("resolver listen address %q: %w (want host:port, e.g. 127.0.0.1:53)", a, err)
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("resolver listen address %q: port %q is not a number from 0 to 65535", a, port)
		}
		ip := netip.IPv6Unspecified()
		if host != "" {
			if ip, err = netip.ParseAddr(host); err != nil {
				return nil, fmt.Errorf("resolver listen address %q: host is not an IP address: %w", a, err)
			}
		}
		listen = append(listen, netip.AddrPortFrom(ip.Unmap(), uint16(p)))
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
			if l.Port() != 0 && l.Port() == ap.Port() && (l.Addr() == ap.Addr().Unmap() || l.Addr().IsUnspecified() && ap.Addr().IsLoopback()) {
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
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		allow[i] = p.Masked()
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
	s.SetZone(Zone{})
	return s, nil
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
// TCP share it). Empty before Ready.
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.addrs...)
}

// Run binds every listen address, UDP then TCP on the port UDP got, serves
// until ctx ends, then shuts down. A bind failure is an error naming the
// address, and nothing stays bound.
func (s *Server) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("resolver: already run")
	}
	var servers []*dns.Server
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	var addrs []string
	var own []*net.UDPConn
	for i, a := range s.cfg.Listen {
		pc, l, err := bind(a)
		if err != nil {
			closeAll()
			return err
		}
		closers = append(closers, func() { pc.Close() }, func() { l.Close() })
		addrs = append(addrs, pc.LocalAddr().String())
		if s.listen[i].Addr().IsUnspecified() {
			servers = append(servers, &dns.Server{PacketConn: pc, Handler: s, UDPSize: maxUDPSize})
		} else {
			own = append(own, pc.(*net.UDPConn))
		}
		servers = append(servers, &dns.Server{Listener: l, Handler: s, ReadTimeout: 5 * time.Second, MaxTCPQueries: -1})
	}
	var udp sync.WaitGroup
	for _, pc := range own {
		s.serveUDP(pc, &udp)
	}

	started := make(chan struct{}, len(servers))
	failed := make(chan error, len(servers))
	for _, srv := range servers {
		srv.NotifyStartedFunc = func() { started <- struct{}{} }
		go func() {
			if err := srv.ActivateAndServe(); err != nil {
				failed <- err
			}
		}()
	}
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout+3*time.Second)
		defer cancel()
		for _, srv := range servers {
			srv.ShutdownContext(sctx) // errors only when it never started
		}
		closeAll()
		udp.Wait()
	}
	for range servers {
		select {
		case <-started:
		case err := <-failed:
			shutdown()
			return fmt.Errorf("serve resolver on %s: %w", strings.Join(addrs, ", "), err)
		case <-ctx.Done():
			shutdown()
			return nil
		}
	}
	s.mu.Lock()
	s.addrs = addrs
	s.mu.Unlock()
	close(s.ready)
	s.log.Info("resolver ready", "addrs", addrs, "upstreams", s.cfg.Upstreams, "domain", s.domain)

	var err error
	select {
	case <-ctx.Done():
	case e := <-failed:
		err = fmt.Errorf("serve resolver on %s: %w", strings.Join(addrs, ", "), e)
	}
	shutdown()
	if err != nil {
		s.log.Error("resolver stopped", "err", err)
		return err
	}
	s.log.Info("resolver stopped", "addrs", addrs)
	return nil
}

// bind binds UDP on a, then TCP on the port UDP got. With port 0, a TCP port
// that is taken has UDP try another port.
func bind(a string) (net.PacketConn, net.Listener, error) {
	host, port, _ := net.SplitHostPort(a)
	// An IPv4 address binds IPv4 only (Go would make 0.0.0.0 a dual-stack
	// [::]); an empty host binds both.
	suffix := ""
	if ip, err := netip.ParseAddr(host); err == nil {
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
// switched off) and the Allow prefixes.
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
	for _, p := range s.cfg.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
