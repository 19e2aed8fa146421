package resolver

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"

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

	z := s.zone.Load()
	if e := z.names[string(lname)]; e != nil {
		sec := e.pick(qr.q.Qtype)
		s.reply(w, &qr, sec.rcode, true, sec, 0)
		return
	}
	if underBytes(lname, s.domain) {
		s.reply(w, &qr, dns.RcodeNameError, true, z.nx, 0)
		return
	}
	s.forward(w, &qr, lname)
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
	need := headerLen + 256 + 4 + optLen
	if sec != nil {
		need += len(sec.b)
	}
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:cap(buf)]
	r := q.r

	flags := uint16(1<<15) | uint16(r.Opcode&0xF)<<11 | uint16(rcode&0xF)
	if aa {
		flags |= 1 << 10
	}
	if r.RecursionDesired {
		flags |= 1 << 8
	}
	flags |= 1 << 7 // RA: this resolver recurses (through its upstreams)
	if sec != nil && sec.ad {
		flags |= 1 << 5
	}
	if r.CheckingDisabled {
		flags |= 1 << 4
	}
	binary.BigEndian.PutUint16(buf[0:], r.Id)
	binary.BigEndian.PutUint16(buf[2:], flags)
	var an, ns, ar uint16
	if sec != nil {
		an, ns, ar = sec.an, sec.ns, sec.ar
	}
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
	if sec != nil {
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
	if q.edns {
		buf[off] = 0 // root
		binary.BigEndian.PutUint16(buf[off+1:], dns.TypeOPT)
		binary.BigEndian.PutUint16(buf[off+3:], maxUDPSize)
		buf[off+5] = byte(rcode >> 4) // extended rcode
		buf[off+6] = 0                // version
		var ednsFlags uint16
		if q.do {
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
	return buf[:off], nil
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
