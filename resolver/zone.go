package resolver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// A zone is built once per SetZone into a zoneData that no one changes
// afterwards, and swapped in with one atomic store: a query reads one
// pointer, so it sees the whole of one zone or the whole of another.
type zoneData struct {
	names map[string]*zname // canonical name -> its prebuilt answers
	nx    *sections         // NXDOMAIN under the domain: the domain's SOA
	zone  Zone              // canonical copy, for Zone()
}

// zname holds one name's answers, prebuilt per type asked.
type zname struct {
	a, aaaa, any, soa, nodata *sections
}

// pick is the answer to qtype.
func (n *zname) pick(qtype uint16) *sections {
	switch qtype {
	case dns.TypeA:
		return n.a
	case dns.TypeAAAA:
		return n.aaaa
	case dns.TypeANY:
		return n.any
	case dns.TypeSOA:
		if n.soa != nil {
			return n.soa
		}
	}
	return n.nodata
}

// sections are the records of one answer, packed for a message whose
// question starts at offset 12: an owner name that is the question's name is
// the pointer 0xC00C. When qlen is not 0, b also points past the question,
// and the question's name must be qlen bytes long (the same name in any case).
type sections struct {
	b          []byte
	qlen       int
	an, ns, ar uint16
	rcode      int
	aa, ad     bool
	ttls       []ttlAt // TTLs that count down (forwarded answers)
}

// ttlAt is a TTL field in sections.b and the TTL received.
type ttlAt struct {
	off int
	ttl uint32
}

// SetZone replaces the zone in whole: a query sees the zone before or the zone
// after, never part of each. Names that Validate refuses are left out.
func (s *Server) SetZone(z Zone) {
	s.zone.Store(s.buildZone(z, s.gen.Add(1)))
}

// Zone is the zone in force: names in canonical form (lower case, fully
// qualified), addresses deduplicated.
func (s *Server) Zone() Zone {
	src := s.zone.Load().zone
	z := Zone{Names: make(map[string][]netip.Addr, len(src.Names))}
	for n, as := range src.Names {
		z.Names[n] = slices.Clone(as)
	}
	return z
}

// Validate says what SetZone would leave out: a name that is not a domain
// name, or an address that is not valid.
func (z Zone) Validate() error {
	var errs []error
	for n, as := range z.Names {
		if _, err := canonicalName(n); err != nil {
			errs = append(errs, fmt.Errorf("zone name %q: %w", n, err))
			continue
		}
		for _, a := range as {
			if !a.IsValid() {
				errs = append(errs, fmt.Errorf("zone name %q: an address is not valid", n))
			}
		}
	}
	return errors.Join(errs...)
}

// canonicalName is name as a query's question spells it once unpacked (fully
// qualified, escapes as miekg/dns prints them), in lower case.
func canonicalName(name string) (string, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return "", errors.New("empty")
	}
	buf := make([]byte, 256)
	n, err := dns.PackDomainName(dns.Fqdn(name), buf, 0, nil, false)
	if err != nil {
		return "", err
	}
	c, _, err := dns.UnpackDomainName(buf[:n], 0)
	if err != nil {
		return "", err
	}
	if c == "." {
		return "", errors.New("the root")
	}
	return lowerString(c), nil
}

// under says whether name is domain or below it; both canonical.
func under(name, domain string) bool {
	if name == domain {
		return true
	}
	if len(name) <= len(domain) || !strings.HasSuffix(name, domain) || name[len(name)-len(domain)-1] != '.' {
		return false
	}
	// The dot before domain must not be escaped ("a\.internal." is one label).
	bs := 0
	for i := len(name) - len(domain) - 2; i >= 0 && name[i] == '\\'; i-- {
		bs++
	}
	return bs%2 == 0
}

// parent is name without its first label; "" for a single label.
func parent(name string) string {
	i, end := dns.NextLabel(name, 0)
	if end {
		return ""
	}
	return name[i:]
}

func (s *Server) buildZone(z Zone, serial uint32) *zoneData {
	ttl := s.cfg.TTL
	addrs := map[string][]netip.Addr{}
	seen := map[string]map[netip.Addr]bool{}
	for n, as := range z.Names {
		c, err := canonicalName(n)
		if err != nil {
			continue
		}
		list := addrs[c]
		if list == nil {
			list = []netip.Addr{}
			seen[c] = map[netip.Addr]bool{}
		}
		for _, a := range as {
			if !a.IsValid() {
				continue
			}
			a = a.Unmap().WithZone("")
			if !seen[c][a] {
				seen[c][a] = true
				list = append(list, a)
			}
		}
		addrs[c] = list
	}

	d := &zoneData{names: map[string]*zname{}, zone: Zone{Names: addrs}}
	domainSOA := soaRR(s.domain, s.domain, ttl, serial)
	d.nx = &sections{b: domainSOA, ns: 1, rcode: dns.RcodeNameError, aa: true}
	domainNodata := &sections{b: domainSOA, ns: 1, aa: true}
	hinfo := hinfoRR(ttl)

	// The domain's apex holds its SOA, and the names between it and a held
	// name exist with no records (empty non-terminals).
	d.names[s.domain] = &zname{nodata: domainNodata}
	for n := range addrs {
		if !under(n, s.domain) {
			continue
		}
		for p := parent(n); p != "" && p != s.domain && under(p, s.domain); p = parent(p) {
			if d.names[p] == nil {
				d.names[p] = &zname{nodata: domainNodata}
			}
		}
	}
	for n, as := range addrs {
		nodata := domainNodata
		if !under(n, s.domain) {
			nodata = &sections{b: soaRR(n, s.domain, ttl, serial), ns: 1, aa: true}
		}
		d.names[n] = &zname{nodata: nodata}
		e := d.names[n]
		e.a = addrSections(as, true, ttl, nodata)
		e.aaaa = addrSections(as, false, ttl, nodata)
		e.any = &sections{b: hinfo, an: 1, aa: true}
	}
	for n, e := range d.names {
		if e.a == nil { // an apex or an empty non-terminal
			e.a, e.aaaa = e.nodata, e.nodata
			e.any = e.nodata
		}
		if n == s.domain {
			e.soa = &sections{b: domainSOA, an: 1, aa: true}
			if e.any == e.nodata {
				e.any = &sections{b: hinfo, an: 1, aa: true}
			}
		} else if !under(n, s.domain) {
			e.soa = &sections{b: e.nodata.b, an: 1, aa: true}
		}
	}
	return d
}

// maxSections bounds a name's records: what fits one message (64 KiB) with
// its header, question and OPT. Addresses past it are left out.
const maxSections = dns.MaxMsgSize - headerLen - 256 - 4 - optLen

// addrSections is the answer of A (v4) or AAAA records for as, or nodata
// when there are none.
func addrSections(as []netip.Addr, v4 bool, ttl uint32, nodata *sections) *sections {
	var b []byte
	var n uint16
	for _, a := range as {
		if a.Is4() != v4 {
			continue
		}
		typ, raw := dns.TypeAAAA, a.As16()
		rd := raw[:]
		if v4 {
			typ = dns.TypeA
			r4 := a.As4()
			rd = r4[:]
		}
		if len(b)+2+10+len(rd) > maxSections {
			break
		}
		b = append(b, 0xC0, 0x0C)
		b = binary.BigEndian.AppendUint16(b, typ)
		b = binary.BigEndian.AppendUint16(b, dns.ClassINET)
		b = binary.BigEndian.AppendUint32(b, ttl)
		b = binary.BigEndian.AppendUint16(b, uint16(len(rd)))
		b = append(b, rd...)
		n++
	}
	if n == 0 {
		return nodata
	}
	return &sections{b: b, an: n, aa: true}
}

// soaRR is the packed SOA owned by owner; its servers are named under
// domain, its minimum (the negative TTL) is the zone's TTL.
func soaRR(owner, domain string, ttl, serial uint32) []byte {
	rr := &dns.SOA{
		Hdr:     dns.RR_Header{Name: owner, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:      "ns." + domain,
		Mbox:    "hostmaster." + domain,
		Serial:  serial,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  ttl,
	}
	buf := make([]byte, dns.Len(rr)+16)
	n, err := dns.PackRR(rr, buf, 0, nil, false)
	if err != nil {
		panic("resolver: packing an SOA: " + err.Error()) // owner and domain are canonical names
	}
	return buf[:n]
}

// hinfoRR is RFC 8482's answer to ANY, owned by the question's name.
func hinfoRR(ttl uint32) []byte {
	b := []byte{0xC0, 0x0C}
	b = binary.BigEndian.AppendUint16(b, dns.TypeHINFO)
	b = binary.BigEndian.AppendUint16(b, dns.ClassINET)
	b = binary.BigEndian.AppendUint32(b, ttl)
	b = binary.BigEndian.AppendUint16(b, 9)
	b = append(b, 7)
	b = append(b, "RFC8482"...)
	return append(b, 0)
}
