package resolver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

const (
	// upstreamUDPSize is the EDNS0 buffer size asked of upstreams (DNS flag
	// day 2020: no fragments).
	upstreamUDPSize = 1232
	// maxTTL and maxNegativeTTL bound how long an answer is cached.
	maxTTL         = 86400
	maxNegativeTTL = 10800
	// maxInflight bounds the upstream queries in flight at once; past it a
	// query that misses the cache gets SERVFAIL at once.
	maxInflight = 1024
)

var errBusy = errors.New("too many upstream queries in flight")

// forwarder asks the upstreams, through the cache.
type forwarder struct {
	upstreams []string
	timeout   time.Duration
	// own says whether the mesh answers for a name (canonical): no
	// upstream's record of one is passed on.
	own   func(name string) bool
	cache *cache
	sem   chan struct{}

	mu       sync.Mutex
	inflight map[string]*call
}

// call is one upstream lookup that identical queries wait for.
type call struct {
	done    chan struct{}
	waiters int // queries waiting on this one
	sec     *sections
	err     error
}

func newForwarder(upstreams []string, size int, timeout time.Duration) *forwarder {
	return &forwarder{
		upstreams: upstreams,
		timeout:   timeout,
		cache:     newCache(size),
		sem:       make(chan struct{}, maxInflight),
		inflight:  map[string]*call{},
	}
}

// readPool holds buffers for upstream answers (TCP's can be 64 KiB).
var readPool = sync.Pool{New: func() any { b := make([]byte, dns.MaxMsgSize); return &b }}

// forward answers q from the cache, or asks the upstreams.
func (s *Server) forward(w dns.ResponseWriter, q *query, lname []byte) {
	var stack [256 + 5]byte
	key := appendKey(stack[:0], lname, q)
	if sec, elapsed, ok := s.fwd.cache.get(key, time.Now()); ok {
		s.reply(w, q, sec.rcode, false, sec, elapsed)
		return
	}
	sec, err := s.fwd.resolve(string(key), string(lname), q)
	if err != nil {
		s.log.Debug("resolver: forward", "name", q.q.Name, "type", dns.TypeToString[q.q.Qtype], "err", err)
		s.reply(w, q, dns.RcodeServerFailure, false, nil, 0)
		return
	}
	s.reply(w, q, sec.rcode, false, sec, 0)
}

// appendKey is the cache key: the name in lower case, type, class, and the
// DO and CD bits (they change what the upstream answers).
func appendKey(b, lname []byte, q *query) []byte {
	b = append(b, lname...)
	b = binary.BigEndian.AppendUint16(b, q.q.Qtype)
	b = binary.BigEndian.AppendUint16(b, q.q.Qclass)
	var f byte
	if q.do {
		f |= 1
	}
	if q.r.CheckingDisabled {
		f |= 2
	}
	return append(b, f)
}

// resolve asks the upstreams once for all identical queries in flight.
func (f *forwarder) resolve(key, name string, q *query) (*sections, error) {
	f.mu.Lock()
	if c := f.inflight[key]; c != nil {
		c.waiters++
		f.mu.Unlock()
		<-c.done
		return c.sec, c.err
	}
	c := &call{done: make(chan struct{})}
	f.inflight[key] = c
	f.mu.Unlock()

	c.sec, c.err = f.lookup(key, name, q)

	f.mu.Lock()
	delete(f.inflight, key)
	f.mu.Unlock()
	close(c.done)
	return c.sec, c.err
}

func (f *forwarder) lookup(key, name string, q *query) (*sections, error) {
	select {
	case f.sem <- struct{}{}:
		defer func() { <-f.sem }()
	default:
		return nil, errBusy
	}
	question := dns.Question{Name: name, Qtype: q.q.Qtype, Qclass: q.q.Qclass}
	resp, err := f.exchange(question, q.do, q.r.CheckingDisabled)
	if err != nil {
		return nil, err
	}
	scrub(resp, name, q.q.Qtype, f.own)
	sec, life, err := answerSections(resp, question)
	if err != nil {
		return nil, err
	}
	if life > 0 {
		f.cache.put(key, sec, time.Now(), life)
	}
	return sec, nil
}

// exchange asks each upstream in turn until one answers NOERROR or
// NXDOMAIN.
func (f *forwarder) exchange(q dns.Question, do, cd bool) (*dns.Msg, error) {
	var errs []error
	for _, up := range f.upstreams {
		resp, err := f.ask(up, "udp", q, do, cd)
		if err == nil && resp.Truncated {
			resp, err = f.ask(up, "tcp", q, do, cd)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("upstream %s: %w", up, err))
			continue
		}
		if resp.Rcode == dns.RcodeSuccess || resp.Rcode == dns.RcodeNameError {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("upstream %s: answered %s", up, dns.RcodeToString[resp.Rcode]))
	}
	if len(errs) == 0 {
		return nil, errors.New("no upstream")
	}
	return nil, errors.Join(errs...)
}

// ask sends q to one upstream with a fresh random ID from a fresh socket, and
// waits for the answer to it: one whose ID or question differs is dropped
// and the wait goes on, until the timeout.
func (f *forwarder) ask(up, network string, q dns.Question, do, cd bool) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.Id = dns.Id()
	m.RecursionDesired = true
	m.CheckingDisabled = cd
	m.Question = []dns.Question{q}
	m.SetEdns0(upstreamUDPSize, do)

	c := &dns.Client{Net: network, Timeout: f.timeout}
	conn, err := c.Dial(up)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(f.timeout)); err != nil {
		return nil, err
	}
	if err := conn.WriteMsg(m); err != nil {
		return nil, err
	}
	bp := readPool.Get().(*[]byte)
	defer readPool.Put(bp)
	for {
		n, err := conn.Read(*bp)
		if err != nil {
			return nil, err
		}
		resp := new(dns.Msg)
		if err := resp.Unpack(append([]byte(nil), (*bp)[:n]...)); err != nil {
			if network == "tcp" {
				return nil, fmt.Errorf("unreadable answer: %w", err)
			}
			continue
		}
		if answers(resp, m) {
			return resp, nil
		}
	}
}

// answers says whether resp is the answer to m: same ID, same question.
func answers(resp, m *dns.Msg) bool {
	if resp.Id != m.Id || !resp.Response || resp.Opcode != dns.OpcodeQuery || len(resp.Question) != 1 {
		return false
	}
	a, q := resp.Question[0], m.Question[0]
	return a.Qtype == q.Qtype && a.Qclass == q.Qclass && strings.EqualFold(a.Name, q.Name)
}

// answerSections packs an upstream's answer for the cache, and says how long
// it may be kept (0: not at all).
func answerSections(resp *dns.Msg, q dns.Question) (*sections, time.Duration, error) {
	if resp.Rcode > 0xF {
		return nil, 0, fmt.Errorf("upstream answered %s", dns.RcodeToString[resp.Rcode])
	}
	m := &dns.Msg{Compress: true}
	m.Response = true
	m.Rcode = resp.Rcode
	m.Question = []dns.Question{q}
	m.Answer = resp.Answer
	m.Ns = resp.Ns
	for _, rr := range resp.Extra {
		if rr.Header().Rrtype != dns.TypeOPT {
			m.Extra = append(m.Extra, rr)
		}
	}
	wire, err := m.Pack()
	if err != nil {
		return nil, 0, fmt.Errorf("pack upstream answer: %w", err)
	}
	qend, err := skipName(wire, headerLen)
	if err != nil {
		return nil, 0, err
	}
	sec := &sections{
		b:     wire[qend+4:],
		qlen:  qend - headerLen,
		an:    binary.BigEndian.Uint16(wire[6:]),
		ns:    binary.BigEndian.Uint16(wire[8:]),
		ar:    binary.BigEndian.Uint16(wire[10:]),
		rcode: resp.Rcode,
		ad:    resp.AuthenticatedData,
	}
	b := sec.b
	minTTL := uint32(maxTTL)
	off := 0
	for range int(sec.an) + int(sec.ns) + int(sec.ar) {
		o, err := skipName(b, off)
		if err != nil || o+10 > len(b) {
			return nil, 0, errors.New("pack upstream answer: records cut short")
		}
		ttl := min(binary.BigEndian.Uint32(b[o+4:]), maxTTL)
		sec.ttls = append(sec.ttls, ttlAt{off: o + 4, ttl: ttl})
		minTTL = min(minTTL, ttl)
		off = o + 10 + int(binary.BigEndian.Uint16(b[o+8:]))
	}

	var life uint32
	switch {
	case resp.Rcode == dns.RcodeNameError || resp.Rcode == dns.RcodeSuccess && len(resp.Answer) == 0:
		// RFC 2308: as long as the SOA's TTL and its minimum allow; not at
		// all without an SOA.
		for _, rr := range resp.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				life = min(soa.Hdr.Ttl, soa.Minttl, maxNegativeTTL)
				break
			}
		}
		for i := range sec.ttls {
			sec.ttls[i].ttl = min(sec.ttls[i].ttl, life)
		}
	case resp.Rcode == dns.RcodeSuccess:
		life = minTTL
	}
	return sec, time.Duration(life) * time.Second, nil
}

// skipName is the offset past the name at off: its labels up to the root, or
// up to a compression pointer.
func skipName(b []byte, off int) (int, error) {
	for off < len(b) {
		l := int(b[off])
		switch {
		case l == 0:
			return off + 1, nil
		case l&0xC0 == 0xC0:
			return off + 2, nil
		}
		off += 1 + l
	}
	return 0, errors.New("name runs past the message")
}

// cache holds forwarded answers: at most size, evicted by the clock
// algorithm, the expired first.
type cache struct {
	mu   sync.RWMutex
	m    map[string]*centry
	ring []*centry
	hand int
	size int
}

// centry is one cached answer; only ref changes after it is made.
type centry struct {
	key     string
	sec     *sections
	at      time.Time
	expires time.Time
	slot    int
	ref     atomic.Bool
}

func newCache(size int) *cache {
	return &cache{m: map[string]*centry{}, size: size}
}

// get is the answer for key if it has not expired, and the whole seconds
// since it was stored.
func (c *cache) get(key []byte, now time.Time) (*sections, uint32, bool) {
	c.mu.RLock()
	e := c.m[string(key)]
	c.mu.RUnlock()
	if e == nil || !now.Before(e.expires) {
		return nil, 0, false
	}
	if !e.ref.Load() {
		e.ref.Store(true)
	}
	return e.sec, uint32(now.Sub(e.at) / time.Second), true
}

func (c *cache) put(key string, sec *sections, now time.Time, life time.Duration) {
	e := &centry{key: key, sec: sec, at: now, expires: now.Add(life)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[key]; old != nil {
		e.slot = old.slot
		c.ring[e.slot], c.m[key] = e, e
		return
	}
	if len(c.ring) < c.size {
		e.slot = len(c.ring)
		c.ring = append(c.ring, e)
		c.m[key] = e
		return
	}
	for {
		old := c.ring[c.hand]
		if !now.Before(old.expires) || !old.ref.Load() {
			delete(c.m, old.key)
			e.slot = c.hand
			c.ring[c.hand], c.m[key] = e, e
			c.hand = (c.hand + 1) % c.size
			return
		}
		old.ref.Store(false)
		c.hand = (c.hand + 1) % c.size
	}
}

// len is how many answers the cache holds.
func (c *cache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
