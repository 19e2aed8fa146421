package resolver

import (
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// lyingUpstream answers each question with the legitimate records for it
// and, around them, records a forwarder must not pass on: the mesh's own
// names, an unrelated name, NS records for the parents, glue.
func lyingUpstream(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.RecursionAvailable = true
	rr := func(s string) dns.RR {
		x, err := dns.NewRR(s)
		if err != nil {
			panic(err)
		}
		return x
	}
	lies := []dns.RR{rr("b.internal. 60 IN A 6.6.6.6"), rr("victim.example.com. 60 IN A 6.6.6.7"), rr("drive.example.org. 60 IN A 6.6.6.8")}
	m.Answer = append(m.Answer, lies...)
	switch strings.ToLower(r.Question[0].Name) {
	case "www.example.com.":
		m.Answer = append(m.Answer,
			rr("www.example.com. 60 IN CNAME alias.example.net."),
			rr("www.example.com. 60 IN TXT \"not asked\""),
			rr("alias.example.net. 60 IN CNAME edge.example.org."),
			rr("edge.example.org. 60 IN A 192.0.2.7"))
	case "into.example.com.":
		m.Answer = append(m.Answer, rr("into.example.com. 60 IN CNAME b.internal."))
	case "x.dn.example.com.":
		m.Answer = append(m.Answer,
			rr("dn.example.com. 60 IN DNAME other.example.net."),
			rr("x.dn.example.com. 60 IN CNAME x.other.example.net."),
			rr("x.other.example.net. 60 IN A 192.0.2.8"))
	case "gone.example.com.":
		m.Rcode = dns.RcodeNameError
		m.Answer = nil
		m.Ns = append(m.Ns, rr("example.com. 60 IN SOA ns.example.com. h.example.com. 1 1 1 1 30"),
			rr("internal. 60 IN SOA ns.evil. h.evil. 1 1 1 1 30"),
			rr("other.example. 60 IN SOA ns.evil. h.evil. 1 1 1 1 30"))
	}
	m.Ns = append(m.Ns, rr("com. 60 IN NS ns.evil."), rr("example.com. 60 IN NS ns.evil."), rr("b.internal. 60 IN A 6.6.6.6"))
	m.Extra = append(m.Extra, rr("ns.evil. 60 IN A 6.6.6.9"), rr("victim.example.com. 60 IN A 6.6.6.7"), rr("b.internal. 60 IN A 6.6.6.6"))
	w.WriteMsg(m)
}

// TestForwardScrubbed: a lying upstream's answers reach the client with
// only the records for the question's name and its CNAME and DNAME chain,
// the SOA of a negative answer's zone, and nothing of the mesh's own names,
// of other names, no NS and no additional records; the cached answer the
// same, over UDP and TCP.
func TestForwardScrubbed(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, lyingUpstream)
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, testZone)
	tests := []struct {
		name   string
		rcode  int
		answer []string
		ns     []string
	}{
		{"www.example.com.", dns.RcodeSuccess, []string{
			"www.example.com.\t60\tIN\tCNAME\talias.example.net.",
			"alias.example.net.\t60\tIN\tCNAME\tedge.example.org.",
			"edge.example.org.\t60\tIN\tA\t192.0.2.7"}, nil},
		{"into.example.com.", dns.RcodeSuccess, []string{"into.example.com.\t60\tIN\tCNAME\tb.internal."}, nil},
		{"x.dn.example.com.", dns.RcodeSuccess, []string{
			"dn.example.com.\t60\tIN\tDNAME\tother.example.net.",
			"x.dn.example.com.\t60\tIN\tCNAME\tx.other.example.net.",
			"x.other.example.net.\t60\tIN\tA\t192.0.2.8"}, nil},
		{"gone.example.com.", dns.RcodeNameError, nil, []string{"example.com.\t30\tIN\tSOA\tns.example.com. h.example.com. 1 1 1 1 30"}},
	}
	for _, tc := range tests {
		for i, network := range []string{"udp", "tcp", "udp", "tcp"} {
			r := ask(t, network, addr, tc.name, dns.TypeA, 1232)
			var extra []dns.RR
			for _, rr := range r.Extra {
				if rr.Header().Rrtype != dns.TypeOPT {
					extra = append(extra, rr)
				}
			}
			if r.Rcode != tc.rcode || !slices.Equal(rrStrings(r.Answer, i > 0), tc.answer) || !slices.Equal(rrStrings(r.Ns, i > 0), tc.ns) || len(extra) != 0 {
				t.Errorf("%s over %s (query %d): %s\nanswer %q\nauthority %q\nadditional %q\nwant answer %q, authority %q, no additional",
					tc.name, network, i, dns.RcodeToString[r.Rcode], rrStrings(r.Answer, false), rrStrings(r.Ns, false), rrStrings(extra, false), tc.answer, tc.ns)
			}
		}
	}
	if n := up.countOf("www.example.com."); n != 1 {
		t.Errorf("upstream asked %d times for www.example.com., want 1 (the scrubbed answer cached)", n)
	}
}

// rrStrings are rrs as text; with fromCache the TTLs that a cached answer
// counts down are put back to the upstream's.
func rrStrings(rrs []dns.RR, fromCache bool) []string {
	var out []string
	for _, rr := range rrs {
		if fromCache {
			h := rr.Header()
			if _, ok := rr.(*dns.SOA); ok {
				h.Ttl = 30
			} else {
				h.Ttl = 60
			}
		}
		out = append(out, rr.String())
	}
	return out
}
