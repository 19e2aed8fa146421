package resolver

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// UDP on a listen address with a host is served by the resolver's own loop:
// it reads each packet into a buffer it reuses, answers a plain query (one
// question, a name of letters, digits, '-' and '_', at most an OPT) for one
// of the mesh's names or from the cache straight from the packet's bytes,
// and hands anything else, unpacked, to ServeDNS on a goroutine of its own.
// A wildcard listen address is left to miekg/dns's server, which answers
// from the address the query was sent to.

// serveUDP reads pc until it is closed, or until stopping is set and a
// read deadline passes (shutdown stops reading so, and answers what was
// read before it closes the socket). Several readers share one socket.
func (s *Server) serveUDP(pc *net.UDPConn, wg *sync.WaitGroup, stopping *atomic.Bool) {
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			buf := make([]byte, dns.MaxMsgSize)
			out := make([]byte, 8192)
			for {
				n, from, err := pc.ReadFromUDPAddrPort(buf)
				if err != nil {
					if errors.Is(err, net.ErrClosed) || stopping.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
						return
					}
					continue
				}
				start := time.Now()
				resp, done := s.fastAnswer(buf[:n], from.Addr(), out)
				if done {
					if resp != nil {
						pc.WriteToUDPAddrPort(resp, from)
						s.observe(start)
					}
					continue
				}
				pkt := append([]byte(nil), buf[:n]...)
				wg.Go(func() { s.serveSlow(pc, pkt, from, start) })
			}
		})
	}
}

// serveSlow answers a packet fastAnswer left, read at start: unpacked and
// as ServeDNS answers. One that does not unpack gets FORMERR, as miekg/dns's
// server answers it.
func (s *Server) serveSlow(pc *net.UDPConn, pkt []byte, from netip.AddrPort, start time.Time) {
	m := new(dns.Msg)
	if err := m.Unpack(pkt); err != nil {
		if len(pkt) >= headerLen && pkt[2]&0x80 == 0 && s.allowed(from.Addr()) {
			var h [headerLen]byte
			copy(h[:2], pkt[:2])
			binary.BigEndian.PutUint16(h[2:], uint16(1<<15)|uint16(pkt[2]&0x78)<<8|dns.RcodeFormatError)
			pc.WriteToUDPAddrPort(h[:], from)
		}
		return
	}
	s.answer(&udpWriter{pc: pc, to: from}, m)
	s.observe(start)
}

// fastAnswer answers a plain query from its bytes into out: the mesh's own
// names, and forwarded names the cache holds. done is false when the packet
// is not plain or the answer needs more (the upstreams, truncation); resp is
// nil with done when nothing is to be sent (a response, not a query).
func (s *Server) fastAnswer(pkt []byte, from netip.Addr, out []byte) (resp []byte, done bool) {
	if len(pkt) < headerLen+5 {
		return nil, false
	}
	flags := binary.BigEndian.Uint16(pkt[2:])
	if flags&(1<<15) != 0 {
		return nil, true // never answer an answer
	}
	if flags>>11&0xF != dns.OpcodeQuery ||
		binary.BigEndian.Uint16(pkt[4:]) != 1 ||
		binary.BigEndian.Uint16(pkt[6:]) != 0 ||
		binary.BigEndian.Uint16(pkt[8:]) != 0 ||
		binary.BigEndian.Uint16(pkt[10:]) > 1 {
		return nil, false
	}
	// The name, in lower case and presentation form, on the stack.
	var stack [256]byte
	lname := stack[:0]
	off := headerLen
	for {
		if off >= len(pkt) {
			return nil, false
		}
		l := int(pkt[off])
		off++
		if l == 0 {
			break
		}
		if l > 63 || off+l > len(pkt) || len(lname)+l+1 > len(stack) {
			return nil, false
		}
		for _, c := range pkt[off : off+l] {
			switch {
			case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			default:
				return nil, false // escapes: ServeDNS spells them as miekg/dns does
			}
			lname = append(lname, c)
		}
		lname = append(lname, '.')
		off += l
	}
	if len(lname) == 0 || off+4 > len(pkt) {
		return nil, false
	}
	qend := off + 4
	qtype := binary.BigEndian.Uint16(pkt[off:])
	if binary.BigEndian.Uint16(pkt[off+2:]) != dns.ClassINET ||
		qtype == dns.TypeAXFR || qtype == dns.TypeIXFR || qtype == dns.TypeOPT {
		return nil, false
	}
	off = qend
	edns, do, limit := false, false, dns.MinMsgSize
	if binary.BigEndian.Uint16(pkt[10:]) == 1 {
		// An OPT: root name, type, size, extended rcode, version, flags,
		// options that end the packet.
		if off+optLen > len(pkt) || pkt[off] != 0 || binary.BigEndian.Uint16(pkt[off+1:]) != dns.TypeOPT ||
			pkt[off+6] != 0 || off+optLen+int(binary.BigEndian.Uint16(pkt[off+9:])) != len(pkt) {
			return nil, false
		}
		edns, do = true, pkt[off+7]&0x80 != 0
		limit = min(max(int(binary.BigEndian.Uint16(pkt[off+3:])), dns.MinMsgSize), maxUDPSize)
	} else if off != len(pkt) {
		return nil, false
	}
	if !s.allowed(from) {
		return nil, false
	}

	rd, cd := flags&(1<<8) != 0, flags&(1<<4) != 0
	var elapsed uint32
	sec := s.local(lname, qtype)
	if sec == nil {
		var ok bool
		if sec, elapsed, ok = s.cached(lname, qtype, do, cd); !ok {
			return nil, false
		}
	}
	if sec.qlen != 0 && qend-4-headerLen != sec.qlen {
		return nil, false
	}
	size := qend + len(sec.b)
	if edns {
		size += optLen
	}
	if size > limit {
		return nil, false // cut to fit by ServeDNS
	}
	out = sized(out, sec)
	copy(out[0:2], pkt[0:2])
	binary.BigEndian.PutUint16(out[2:], answerFlags(dns.OpcodeQuery, rd, cd, sec.rcode, sec.aa, sec))
	binary.BigEndian.PutUint16(out[4:], 1)
	copy(out[headerLen:], pkt[headerLen:qend])
	return finish(out, qend, sec.rcode, sec, elapsed, edns, do), true
}

// cached is the answer the cache holds for lname (lower case,
// presentation form), qtype and the DO and CD bits, with the seconds
// since it was stored; the key is built on the stack.
func (s *Server) cached(lname []byte, qtype uint16, do, cd bool) (*sections, uint32, bool) {
	var kstack [256 + 5]byte
	key := append(kstack[:0], lname...)
	key = binary.BigEndian.AppendUint16(key, qtype)
	key = binary.BigEndian.AppendUint16(key, dns.ClassINET)
	var f byte
	if do {
		f |= 1
	}
	if cd {
		f |= 2
	}
	key = append(key, f)
	return s.fwd.cache.get(key, time.Now())
}

// udpWriter is ServeDNS's writer for a packet read by serveUDP.
type udpWriter struct {
	pc *net.UDPConn
	to netip.AddrPort
}

func (w *udpWriter) LocalAddr() net.Addr  { return w.pc.LocalAddr() }
func (w *udpWriter) RemoteAddr() net.Addr { return net.UDPAddrFromAddrPort(w.to) }
func (w *udpWriter) Write(b []byte) (int, error) {
	return w.pc.WriteToUDPAddrPort(b, w.to)
}
func (w *udpWriter) WriteMsg(m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}
func (w *udpWriter) Close() error        { return nil }
func (w *udpWriter) TsigStatus() error   { return nil }
func (w *udpWriter) TsigTimersOnly(bool) {}
func (w *udpWriter) Hijack()             {}
