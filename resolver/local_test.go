package resolver

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

var testZone = Zone{Names: map[string][]netip.Addr{
	"alpha.internal":         addrs("10.1.0.1", "10.1.0.2", "fd00::1"),
	"web.alpha.internal.":    addrs("10.1.0.1"),
	"v6only.internal":        addrs("fd00::2"),
	"svc.deep.beta.internal": addrs("10.1.0.3"),
	"Drive.Example.Org":      addrs("10.1.0.4"),
	"bare.internal":          nil,
}}

// TestLocalAnswers asks the mesh's own names over UDP and TCP: A, AAAA,
// NODATA for a type the name does not hold, ANY, NXDOMAIN against NODATA with
// the SOA, AA on every one, and nothing ever forwarded.
func TestLocalAnswers(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, testZone)

	const domainSOA = "internal."
	tests := []struct {
		name     string
		qtype    uint16
		rcode    int
		answer   []string // addresses, or "HINFO", "SOA"
		soaOwner string   // the SOA in authority; "" for none
	}{
		{"alpha.internal.", dns.TypeA, dns.RcodeSuccess, []string{"10.1.0.1", "10.1.0.2"}, ""},
		{"alpha.internal.", dns.TypeAAAA, dns.RcodeSuccess, []string{"fd00::1"}, ""},
		{"web.alpha.internal.", dns.TypeA, dns.RcodeSuccess, []string{"10.1.0.1"}, ""},
		{"web.alpha.internal.", dns.TypeAAAA, dns.RcodeSuccess, nil, domainSOA},
		{"v6only.internal.", dns.TypeA, dns.RcodeSuccess, nil, domainSOA},
		{"alpha.internal.", dns.TypeMX, dns.RcodeSuccess, nil, domainSOA},
		{"alpha.internal.", dns.TypeTXT, dns.RcodeSuccess, nil, domainSOA},
		{"alpha.internal.", dns.TypeANY, dns.RcodeSuccess, []string{"HINFO"}, ""},
		{"bare.internal.", dns.TypeA, dns.RcodeSuccess, nil, domainSOA},
		{"missing.internal.", dns.TypeA, dns.RcodeNameError, nil, domainSOA},
		{"missing.internal.", dns.TypeAAAA, dns.RcodeNameError, nil, domainSOA},
		{"web.alpha.internal.internal.", dns.TypeA, dns.RcodeNameError, nil, domainSOA}, // no alias
		{"x.web.alpha.internal.", dns.TypeA, dns.RcodeNameError, nil, domainSOA},
		{"deep.beta.internal.", dns.TypeA, dns.RcodeSuccess, nil, domainSOA}, // empty non-terminal
		{"beta.internal.", dns.TypeA, dns.RcodeSuccess, nil, domainSOA},
		{"internal.", dns.TypeSOA, dns.RcodeSuccess, []string{"SOA"}, ""},
		{"internal.", dns.TypeA, dns.RcodeSuccess, nil, domainSOA},
		{"drive.example.org.", dns.TypeA, dns.RcodeSuccess, []string{"10.1.0.4"}, ""}, // split horizon
		{"drive.example.org.", dns.TypeAAAA, dns.RcodeSuccess, nil, "drive.example.org."},
		{"DRIVE.example.ORG.", dns.TypeA, dns.RcodeSuccess, []string{"10.1.0.4"}, ""},
		{"AlPhA.InTeRnAl.", dns.TypeA, dns.RcodeSuccess, []string{"10.1.0.1", "10.1.0.2"}, ""},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tc := range tests {
			t.Run(fmt.Sprintf("%s/%s/%s", network, tc.name, dns.TypeToString[tc.qtype]), func(t *testing.T) {
				r := ask(t, network, addr, tc.name, tc.qtype, 0)
				if r.Rcode != tc.rcode {
					t.Fatalf("rcode %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
				}
				if !r.Authoritative {
					t.Error("AA not set")
				}
				if len(r.Question) != 1 || r.Question[0].Name != tc.name || r.Question[0].Qtype != tc.qtype {
					t.Errorf("question %v, want the one asked (%s, case kept)", r.Question, tc.name)
				}
				var got []string
				for _, rr := range r.Answer {
					if !strings.EqualFold(rr.Header().Name, tc.name) {
						t.Errorf("answer owned by %s", rr.Header().Name)
					}
					if rr.Header().Ttl != DefaultTTL {
						t.Errorf("answer TTL %d, want %d", rr.Header().Ttl, DefaultTTL)
					}
					switch rr := rr.(type) {
					case *dns.HINFO:
						if rr.Cpu != "RFC8482" {
							t.Errorf("HINFO %q, want RFC8482", rr.Cpu)
						}
						got = append(got, "HINFO")
					case *dns.SOA:
						got = append(got, "SOA")
					default:
						got = append(got, answerAddrs(&dns.Msg{Answer: []dns.RR{rr}})...)
					}
				}
				if !slices.Equal(got, tc.answer) {
					t.Errorf("answer %v, want %v", got, tc.answer)
				}
				switch {
				case tc.soaOwner == "" && len(r.Ns) != 0:
					t.Errorf("authority %v, want none", r.Ns)
				case tc.soaOwner != "":
					soa, ok := onlySOA(r.Ns)
					if !ok || soa.Hdr.Name != tc.soaOwner {
						t.Fatalf("authority %v, want the SOA of %s", r.Ns, tc.soaOwner)
					}
					if soa.Minttl != DefaultTTL {
						t.Errorf("SOA minimum %d, want the zone TTL %d", soa.Minttl, DefaultTTL)
					}
				}
			})
		}
	}
	if n := up.count(); n != 0 {
		t.Errorf("the mesh's own names went upstream %d times", n)
	}
}

func onlySOA(rrs []dns.RR) (*dns.SOA, bool) {
	if len(rrs) != 1 {
		return nil, false
	}
	soa, ok := rrs[0].(*dns.SOA)
	return soa, ok
}

// TestOtherQueries covers what is not a plain question: another class,
// another opcode, zone transfers, an unknown EDNS version.
func TestOtherQueries(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, testZone)
	tests := []struct {
		name  string
		edit  func(m *dns.Msg)
		rcode int
	}{
		{"class CH", func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }, dns.RcodeNotImplemented},
		{"opcode STATUS", func(m *dns.Msg) { m.Opcode = dns.OpcodeStatus }, dns.RcodeNotImplemented},
		{"AXFR", func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAXFR }, dns.RcodeRefused},
		{"EDNS version 1", func(m *dns.Msg) { m.SetEdns0(1232, false); m.IsEdns0().SetVersion(1) }, dns.RcodeBadVers},
		{"two OPTs", func(m *dns.Msg) { m.SetEdns0(1232, false); m.Extra = append(m.Extra, m.Extra[0]) }, dns.RcodeFormatError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := new(dns.Msg)
			m.SetQuestion("alpha.internal.", dns.TypeA)
			tc.edit(m)
			for _, network := range []string{"udp", "tcp"} {
				r := exchange(t, network, addr, m)
				if r.Rcode != tc.rcode {
					t.Fatalf("%s: rcode %s, want %s", network, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
				}
				if len(r.Answer) != 0 {
					t.Errorf("%s: answer %v, want none", network, r.Answer)
				}
			}
		})
	}
	if n := up.count(); n != 0 {
		t.Errorf("went upstream %d times", n)
	}
}

// TestTruncatedRetriedOverTCP: a name with 100 addresses does not fit a
// plain UDP answer, which comes cut with TC set; TCP gives all of it.
func TestTruncatedRetriedOverTCP(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	many := make([]netip.Addr, 100)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 2, byte(i / 256), byte(i % 256)})
	}
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, Zone{Names: map[string][]netip.Addr{"many.internal": many}})

	q := new(dns.Msg)
	q.SetQuestion("many.internal.", dns.TypeA)
	r, size := askUDPRaw(t, addr, q)
	if !r.Truncated {
		t.Fatalf("UDP answer of %d records not truncated", len(r.Answer))
	}
	if len(r.Answer) == 0 || len(r.Answer) >= 100 {
		t.Errorf("truncated answer holds %d records, want some and fewer than 100", len(r.Answer))
	}
	if size > dns.MinMsgSize {
		t.Errorf("UDP answer is %d bytes, over 512", size)
	}
	r = ask(t, "tcp", addr, "many.internal.", dns.TypeA, 0)
	if r.Truncated || len(r.Answer) != 100 {
		t.Fatalf("TCP answer: TC %v, %d records, want all 100", r.Truncated, len(r.Answer))
	}
	for i, a := range answerAddrs(r) {
		if a != many[i].String() {
			t.Fatalf("record %d is %s, want %s", i, a, many[i])
		}
	}
}

// TestEDNSBufferSize: the client's EDNS0 size decides where a UDP answer is
// cut (512 at least, 4096 at most), and the answer carries an OPT.
func TestEDNSBufferSize(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	v6 := func(n int) []netip.Addr {
		out := make([]netip.Addr, n)
		for i := range out {
			out[i] = netip.AddrFrom16([16]byte{0xfd, 15: byte(i), 14: byte(i >> 8)})
		}
		return out
	}
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, Zone{Names: map[string][]netip.Addr{
		"hundred.internal": v6(100), // 2,800 bytes of records
		"lots.internal":    v6(200), // 5,600
	}})
	tests := []struct {
		name      string
		bufsize   uint16 // 0: no OPT
		truncated bool
		limit     int
	}{
		{"hundred.internal.", 0, true, 512},
		{"hundred.internal.", 100, true, 512}, // below 512 counts as 512
		{"hundred.internal.", 512, true, 512},
		{"hundred.internal.", 1232, true, 1232},
		{"hundred.internal.", 4096, false, 4096},
		{"lots.internal.", 4096, true, 4096},
		{"lots.internal.", 65000, true, 4096}, // capped
	}
	answers := map[string]int{}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%d", tc.name, tc.bufsize), func(t *testing.T) {
			q := new(dns.Msg)
			q.SetQuestion(tc.name, dns.TypeAAAA)
			if tc.bufsize > 0 {
				q.SetEdns0(tc.bufsize, false)
			}
			r, size := askUDPRaw(t, addr, q)
			if size > tc.limit {
				t.Errorf("answer is %d bytes, over %d", size, tc.limit)
			}
			if r.Truncated != tc.truncated {
				t.Errorf("TC %v, want %v (%d records, %d bytes)", r.Truncated, tc.truncated, len(r.Answer), size)
			}
			if tc.truncated && size <= tc.limit-28 {
				t.Errorf("truncated answer is %d bytes, room for another record under %d", size, tc.limit)
			}
			opt := r.IsEdns0()
			if (opt != nil) != (tc.bufsize > 0) {
				t.Errorf("OPT in answer %v, asked with OPT %v", opt != nil, tc.bufsize > 0)
			}
			if opt != nil && opt.UDPSize() != maxUDPSize {
				t.Errorf("OPT advertises %d, want %d", opt.UDPSize(), maxUDPSize)
			}
			answers[fmt.Sprint(tc.name, tc.limit)] = len(r.Answer)
		})
	}
	if a := answers; !(a["hundred.internal.512"] < a["hundred.internal.1232"] && a["hundred.internal.1232"] < a["hundred.internal.4096"]) {
		t.Errorf("records kept by size %v: want more for a larger buffer", answers)
	}

	// DO is copied into the answer's OPT.
	m := new(dns.Msg)
	m.SetQuestion("hundred.internal.", dns.TypeA)
	m.SetEdns0(1232, true)
	r := exchange(t, "udp", addr, m)
	if opt := r.IsEdns0(); opt == nil || !opt.Do() {
		t.Errorf("DO not echoed: OPT %v", opt)
	}
}

// TestZoneCanonical: Zone gives back the names in canonical form, merged and
// deduplicated; Validate names what SetZone leaves out.
func TestZoneCanonical(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	s, err := New(Config{Listen: []string{"127.0.0.1:0"}, Upstreams: []string{up.addr}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	z := Zone{Names: map[string][]netip.Addr{
		"Alpha.Internal":  addrs("10.0.0.1", "::ffff:10.0.0.2"),
		"alpha.internal.": addrs("10.0.0.1"),
		"bad..name":       addrs("10.0.0.3"),
	}}
	if err := z.Validate(); err == nil || !strings.Contains(err.Error(), "bad..name") {
		t.Errorf("Validate: %v, want an error naming bad..name", err)
	}
	s.SetZone(z)
	got := s.Zone()
	want := map[string][]string{"alpha.internal.": {"10.0.0.1", "10.0.0.2"}}
	if len(got.Names) != len(want) {
		t.Fatalf("Zone %v, want %v", got.Names, want)
	}
	for n, as := range got.Names {
		var ss []string
		for _, a := range as {
			ss = append(ss, a.String())
		}
		if !slices.Equal(ss, want[n]) {
			t.Errorf("%s: %v, want %v", n, ss, want[n])
		}
	}
}

// TestHugeName: a name with more addresses than one message holds keeps as
// many as fit one (4,078 A records), and answers them whole over TCP.
func TestHugeName(t *testing.T) {
	t.Parallel()
	up := startUpstream(t, answerA(300))
	huge := make([]netip.Addr, 70000)
	for i := range huge {
		huge[i] = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	_, addr := start(t, Config{Upstreams: []string{up.addr}}, Zone{Names: map[string][]netip.Addr{"huge.internal": huge}})
	r := ask(t, "tcp", addr, "huge.internal.", dns.TypeA, 0)
	if want := maxSections / 16; r.Rcode != dns.RcodeSuccess || r.Truncated || len(r.Answer) != want {
		t.Fatalf("rcode %s, TC %v, %d records; want %d", dns.RcodeToString[r.Rcode], r.Truncated, len(r.Answer), want)
	}
}
