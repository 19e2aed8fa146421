package resolver

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

const (
	// maxUDPSize caps the client's EDNS0 buffer size, and is what the
	// resolver advertises.
	maxUDPSize = 4096
	// headerLen is a DNS header's length.
	headerLen = 12
	// optLen is the length of the OPT the answer carries: root name, type,
	// class, TTL, empty rdata.
	optLen = 11
)

// bufPool holds response buffers; one fits any answer for UDP.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 8192); return &b }}

// query is what ServeDNS reads from a request once.
type query struct {
	r     *dns.Msg
	q     dns.Question
	edns  bool
	do    bool
	limit int // the largest answer the client takes
}

// ServeDNS answers one query. It logs nothing above debug.
func (s *Server) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	start := time.Now()
	s.answer(w, r)
	s.observe(start)
}

// observe gives Config.Latency, when set, the time since start: a query's
// time to answer.
func (s *Server) observe(start time.Time) {
	if s.cfg.Latency != nil {
		s.cfg.Latency.Observe(time.Since(start).Seconds())
	}
}

// answer answers r, a query unless it is an answer.
func (s *Server) answer(w dns.ResponseWriter, r *dns.Msg) {
	if r.Response {
		return // never answer an answer
	}
	from, tcp := remote(w)
	qr := query{r: r, limit: dns.MinMsgSize}
	if tcp {
		qr.limit = dns.MaxMsgSize
	}
	nopt := 0
	var opt *dns.OPT
	for _, rr := range r.Extra {
		if o, ok := rr.(*dns.OPT); ok {
			opt = o
			nopt++
		}
	}
	if opt != nil {
		qr.edns, qr.do = true, opt.Do()
		if !tcp {
			qr.limit = min(max(int(opt.UDPSize()), dns.MinMsgSize), maxUDPSize)
		}
	}
	if len(r.Question) == 1 {
		qr.q = r.Question[0]
	}

	switch {
	case len(r.Question) != 1 || nopt > 1:
		s.reply(w, &qr, dns.RcodeFormatError, false, nil, 0)
		return
	case !s.allowed(from):
		s.reply(w, &qr, dns.RcodeRefused, false, nil, 0)
		return
	case r.Opcode != dns.OpcodeQuery:
		s.reply(w, &qr, dns.RcodeNotImplemented, false, nil, 0)
		return
	case opt != nil && opt.Version() != 0:
		s.reply(w, &qr, dns.RcodeBadVers, false, nil, 0)
		return
	case qr.q.Qclass != dns.ClassINET:
		s.reply(w, &qr, dns.RcodeNotImplemented, false, nil, 0)
		return
	case qr.q.Qtype == dns.TypeAXFR || qr.q.Qtype == dns.TypeIXFR:
		s.reply(w, &qr, dns.RcodeRefused, false, nil, 0)
		return
	case qr.q.Qtype == dns.TypeOPT:
		s.reply(w, &qr, dns.RcodeFormatError, false, nil, 0)
		return
	}

	// The name in lower case, on the stack: a map index with string(bytes)
	// does not allocate.
	var stack [256]byte
	lname := stack[:0]
	if len(qr.q.Name) > len(stack) {
		lname = make([]byte, 0, len(qr.q.Name))
	}
	lname = appendLower(lname, qr.q.Name)

	if sec := s.local(lname, qr.q.Qtype); sec != nil {
		s.reply(w, &qr, sec.rcode, sec.aa, sec, 0)
		return
	}
	s.forward(w, &qr, lname)
}

// local is the zone's answer for a name (canonical, in bytes) and type, or
// nil when the name is not the mesh's to answer.
func (s *Server) local(lname []byte, qtype uint16) *sections {
	z := s.zone.Load()
	if e := z.names[string(lname)]; e != nil {
		return e.pick(qtype)
	}
	if underBytes(lname, s.domain) {
		return z.nx
	}
	return nil
}

// remote is the address a query came from, and whether over TCP.
func remote(w dns.ResponseWriter) (netip.Addr, bool) {
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr(), false
	case *net.TCPAddr:
		return a.AddrPort().Addr(), true
	}
	return netip.Addr{}, false
}

// appendLower appends s in ASCII lower case.
func appendLower(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// underBytes is under for a name held in bytes.
func underBytes(name []byte, domain string) bool {
	if len(name) < len(domain) || string(name[len(name)-len(domain):]) != domain {
		return false
	}
	if len(name) == len(domain) {
		return true
	}
	if name[len(name)-len(domain)-1] != '.' {
		return false
	}
	bs := 0
	for i := len(name) - len(domain) - 2; i >= 0 && name[i] == '\\'; i-- {
		bs++
	}
	return bs%2 == 0
}

// reply answers q with rcode and sec's records (nil: none), TTLs counted down
// by elapsed seconds, and writes it, cut to fit when it is too large.
func (s *Server) reply(w dns.ResponseWriter, q *query, rcode int, aa bool, sec *sections, elapsed uint32) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	b, err := build(*bp, q, rcode, aa, sec, elapsed)
	if err != nil {
		if rcode == dns.RcodeServerFailure {
			return // nothing more to try
		}
		s.log.Debug("resolver: build answer", "name", q.q.Name, "err", err)
		s.reply(w, q, dns.RcodeServerFailure, false, nil, 0)
		return
	}
	if len(b) <= q.limit {
		w.Write(b)
		return
	}
	// Too large for the client: cut it to fit and set TC.
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		s.log.Debug("resolver: unpack own answer", "name", q.q.Name, "err", err)
		return
	}
	m.Truncate(q.limit)
	w.WriteMsg(m)
}

var errQuestionLen = errors.New("question name does not fit the answer's records")

// build writes the answer into buf (or a larger one): the header, the
// question as asked (its name's case kept), sec's records with their TTLs
// counted down, and an OPT when the query had one.
func build(buf []byte, q *query, rcode int, aa bool, sec *sections, elapsed uint32) ([]byte, error) {
	buf = sized(buf, sec)
	r := q.r
	binary.BigEndian.PutUint16(buf[0:], r.Id)
	binary.BigEndian.PutUint16(buf[2:], answerFlags(r.Opcode, r.RecursionDesired, r.CheckingDisabled, rcode, aa, sec))
	off := headerLen
	if q.q.Name != "" {
		end, err := dns.PackDomainName(q.q.Name, buf, off, nil, false)
		if err != nil {
			return nil, err
		}
		if sec != nil && sec.qlen != 0 && end-off != sec.qlen {
			return nil, errQuestionLen
		}
		off = end
		binary.BigEndian.PutUint16(buf[off:], q.q.Qtype)
		binary.BigEndian.PutUint16(buf[off+2:], q.q.Qclass)
		off += 4
		binary.BigEndian.PutUint16(buf[4:], 1)
	} else {
		binary.BigEndian.PutUint16(buf[4:], 0)
	}
	return finish(buf, off, rcode, sec, elapsed, q.edns, q.do), nil
}

// sized is buf, or a larger one, long enough for any question and sec.
func sized(buf []byte, sec *sections) []byte {
	need := headerLen + 256 + 4 + optLen
	if sec != nil {
		need += len(sec.b)
	}
	if cap(buf) < need {
		return make([]byte, need)
	}
	return buf[:cap(buf)]
}

// answerFlags are the second 16 bits of an answer's header.
func answerFlags(opcode int, rd, cd bool, rcode int, aa bool, sec *sections) uint16 {
	flags := uint16(1<<15) | uint16(opcode&0xF)<<11 | uint16(rcode&0xF)
	if aa {
		flags |= 1 << 10
	}
	if rd {
		flags |= 1 << 8
	}
	flags |= 1 << 7 // RA: this resolver recurses (through its upstreams)
	if sec != nil && sec.ad {
		flags |= 1 << 5
	}
	if cd {
		flags |= 1 << 4
	}
	return flags
}

// finish writes, after the question that ends at off, sec's records with
// their TTLs counted down by elapsed, an OPT when edns, and the counts.
func finish(buf []byte, off int, rcode int, sec *sections, elapsed uint32, edns, do bool) []byte {
	var an, ns, ar uint16
	if sec != nil {
		an, ns, ar = sec.an, sec.ns, sec.ar
		start := off
		off += copy(buf[off:], sec.b)
		for _, t := range sec.ttls {
			ttl := uint32(0)
			if t.ttl > elapsed {
				ttl = t.ttl - elapsed
			}
			binary.BigEndian.PutUint32(buf[start+t.off:], ttl)
		}
	}
	if edns {
		buf[off] = 0 // root
		binary.BigEndian.PutUint16(buf[off+1:], dns.TypeOPT)
		binary.BigEndian.PutUint16(buf[off+3:], maxUDPSize)
		buf[off+5] = byte(rcode >> 4) // extended rcode
		buf[off+6] = 0                // version
		var ednsFlags uint16
		if do {
			ednsFlags = 1 << 15
		}
		binary.BigEndian.PutUint16(buf[off+7:], ednsFlags)
		binary.BigEndian.PutUint16(buf[off+9:], 0)
		off += optLen
		ar++
	}
	binary.BigEndian.PutUint16(buf[6:], an)
	binary.BigEndian.PutUint16(buf[8:], ns)
	binary.BigEndian.PutUint16(buf[10:], ar)
	return buf[:off]
}

// lowerString is s in ASCII lower case (strings.ToLower would also fold
// bytes above 0x7F that a name may hold escaped or raw).
func lowerString(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return string(appendLower(make([]byte, 0, len(s)), s))
		}
	}
	return s
}
