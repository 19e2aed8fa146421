package resolver

import (
	"slices"

	"github.com/miekg/dns"
)

// scrub keeps of an upstream's answer to the question qname (canonical),
// qtype only what a forwarder may believe of it (RFC 5452 §6, as unbound's
// scrubber and its minimal responses do), in place:
//
//   - Answer: records owned by qname, or by a name on its CNAME or DNAME
//     chain, followed in the order the records come: a CNAME owned by the
//     chain's last name leads to its target, a DNAME above that name to the
//     name it synthesizes. Of a name on the chain only the type asked (any
//     for ANY), CNAME, and the RRSIGs over those are kept; of a DNAME's
//     owner the DNAME and its RRSIG.
//   - Authority: without an answer for the chain's last name (NXDOMAIN, or
//     NODATA), the SOA of a zone that holds that name (owned by it or an
//     ancestor), and the NSEC, NSEC3 and RRSIG records under that SOA's
//     owner; with an answer, the NSEC, NSEC3 and RRSIG records under the
//     zone that signed it (a wildcard's proof). Never an NS: the forwarder
//     knows no zone cut, so a delegation it is told of is one it cannot
//     check, and a stub needs none.
//   - Additional: nothing (the OPT is the resolver's own). Glue and the
//     addresses of an answer's targets are a stub's to ask for.
//
// A record owned by a name the mesh answers for (own) is never kept from
// an upstream, whichever section carries it, and a chain that enters one
// stops there.
func scrub(resp *dns.Msg, qname string, qtype uint16, own func(string) bool) {
	chain := []string{qname} // names on the chain, in order
	var dnames []string      // owners of the DNAMEs followed
	sname := qname           // the chain's last name
	follow := qtype != dns.TypeCNAME && qtype != dns.TypeDNAME && qtype != dns.TypeANY
	answer := resp.Answer[:0]
	for _, rr := range resp.Answer {
		h := rr.Header()
		owner := lowerString(h.Name)
		if h.Class != dns.ClassINET || own(owner) {
			continue
		}
		switch {
		case slices.Contains(chain, owner):
			if !wanted(rr, qtype) {
				continue
			}
			answer = append(answer, rr)
			if c, ok := rr.(*dns.CNAME); ok && follow && owner == sname {
				sname = lowerString(c.Target)
				chain = append(chain, sname)
			}
		case slices.Contains(dnames, owner):
			if sig, ok := rr.(*dns.RRSIG); ok && sig.TypeCovered == dns.TypeDNAME || h.Rrtype == dns.TypeDNAME {
				answer = append(answer, rr)
			}
		case h.Rrtype == dns.TypeDNAME && follow && sname != owner && under(sname, owner):
			next := sname[:len(sname)-len(owner)] + lowerString(rr.(*dns.DNAME).Target)
			if _, ok := dns.IsDomainName(next); !ok || len(next) > 255 {
				continue // the name it makes is too long: YXDOMAIN's case
			}
			answer = append(answer, rr)
			dnames = append(dnames, owner)
			sname = next
			chain = append(chain, sname)
		}
	}
	resp.Answer = answer

	// The zones whose proofs the authority may carry.
	var zones []string
	answered := slices.ContainsFunc(answer, func(rr dns.RR) bool {
		return lowerString(rr.Header().Name) == sname && rr.Header().Rrtype != dns.TypeRRSIG && (rr.Header().Rrtype == qtype || qtype == dns.TypeANY || !follow)
	})
	if answered {
		for _, rr := range answer {
			if sig, ok := rr.(*dns.RRSIG); ok {
				if z := lowerString(sig.SignerName); under(lowerString(sig.Hdr.Name), z) && !slices.Contains(zones, z) {
					zones = append(zones, z)
				}
			}
		}
	}
	ns := resp.Ns[:0]
	if !answered {
		for _, rr := range resp.Ns {
			owner := lowerString(rr.Header().Name)
			if rr.Header().Rrtype == dns.TypeSOA && rr.Header().Class == dns.ClassINET && under(sname, owner) && !own(owner) {
				ns = append(ns, rr)
				zones = append(zones, owner)
			}
		}
	}
	for _, rr := range resp.Ns {
		owner := lowerString(rr.Header().Name)
		if !proof(rr) {
			continue
		}
		if rr.Header().Class == dns.ClassINET && !own(owner) && slices.ContainsFunc(zones, func(z string) bool { return under(owner, z) }) {
			ns = append(ns, rr)
		}
	}
	resp.Ns = ns
	resp.Extra = nil
}

// wanted says whether rr, owned by a name on the chain, answers qtype: the
// type asked, a CNAME, or an RRSIG over either.
func wanted(rr dns.RR, qtype uint16) bool {
	t := rr.Header().Rrtype
	if sig, ok := rr.(*dns.RRSIG); ok {
		t = sig.TypeCovered
	}
	return qtype == dns.TypeANY || t == qtype || t == dns.TypeCNAME
}

// proof says whether rr is an authority record that proves an answer or a
// denial: an NSEC or NSEC3, or an RRSIG over one or over an SOA.
func proof(rr dns.RR) bool {
	t := rr.Header().Rrtype
	if sig, ok := rr.(*dns.RRSIG); ok {
		t = sig.TypeCovered
		if t == dns.TypeSOA {
			return true
		}
	}
	return t == dns.TypeNSEC || t == dns.TypeNSEC3
}

// ownName says whether the mesh answers for name (canonical): the domain
// and the names under it, and each public name the zone holds.
func (s *Server) ownName(name string) bool {
	return under(name, s.domain) || s.zone.Load().names[name] != nil
}
