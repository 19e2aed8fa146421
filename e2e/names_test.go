package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/miekg/dns"
)

// ask sends one query to the resolver at addr, over UDP on loopback.
func ask(t *testing.T, addr, name string, qtype uint16) (*dns.Msg, error) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	r, _, err := c.Exchange(m, addr)
	return r, err
}

func answers(r *dns.Msg) string {
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return strings.Join(out, ",")
}

// TestRouteAddedOnAResolvesOnB: after a push that adds a route on node
// alpha, node beta's resolver answers it, and the public name it serves;
// a name nothing serves is NXDOMAIN, never an invented alias.
func TestRouteAddedOnAResolvesOnB(t *testing.T) {
	t.Parallel()
	m := newMesh(t, "--root", t.TempDir())
	betaDir, _ := m.join(t, "beta", "--root", t.TempDir())
	var betaDNS string
	poll.Until(t, 10*time.Second, "beta's resolver address", func() error {
		_, err := os.Stat(filepath.Join(betaDir, "addrs.json"))
		return err
	})
	betaDNS = dnsAddr(t, betaDir)

	mustRun(t, "module", "register", "--dir", m.dir, example("hello"))
	if r, err := ask(t, betaDNS, "hello.alpha.internal", dns.TypeA); err != nil || r.Rcode != dns.RcodeNameError {
		t.Fatalf("before the push: %v %v, want NXDOMAIN", r, err)
	}
	// hello serves routes: every node's resolver serves them, so the hint
	// says the names change for every node, and alpha's declaration.
	if out := mustRun(t, "assign", "--dir", m.dir, "--set", "token=t", "hello", "alpha"); out != "hello assigned to alpha; it changes the names every node serves and the declaration of alpha: mesh push alpha sends both (the names to all 2 nodes, in one roster message)\n" {
		t.Errorf("assign hello alpha said %q", out)
	}
	o, code := pushJSON(t, m.dir)
	if code != 0 {
		t.Fatalf("push: %+v", o)
	}
	// The push says it sent the names, and that both hosts hold them.
	if r := o.Roster; r == nil || r.Nodes != 2 || r.Held != 2 || len(r.NotYet) != 0 || len(r.Silent) != 0 {
		t.Errorf("push's roster: %+v, want it sent to 2 nodes and held by both", r)
	}
	cases := []struct{ name, want string }{
		{"hello.alpha.internal", "127.0.0.1"},
		{"hello.example.org", "127.0.0.1"},
		{"alpha.internal", "127.0.0.1"},
		{"beta.internal", "127.0.0.2"},
		{"HELLO.Alpha.Internal", "127.0.0.1"},
	}
	for _, c := range cases {
		r, err := ask(t, betaDNS, c.name, dns.TypeA)
		if err != nil || r.Rcode != dns.RcodeSuccess || answers(r) != c.want || !r.Authoritative {
			t.Errorf("beta's resolver, %s: %v %v, want %s, authoritative", c.name, r, err, c.want)
		}
	}
	for _, name := range []string{"hello.beta.internal", "hello.alpha.internal.internal", "nope.internal"} {
		if r, err := ask(t, betaDNS, name, dns.TypeA); err != nil || r.Rcode != dns.RcodeNameError {
			t.Errorf("%s: %v %v, want NXDOMAIN", name, r, err)
		}
	}
	// alpha's own resolver answers the same.
	if r, err := ask(t, m.addrs.DNS, "hello.alpha.internal", dns.TypeA); err != nil || answers(r) != "127.0.0.1" {
		t.Errorf("alpha's resolver: %v %v", r, err)
	}

	// A module without routes changes alpha's declaration alone; the same
	// assignment again changes none; unassigning hello changes the names every node serves, and alpha's declaration.
	mustRun(t, "module", "register", "--dir", m.dir, example("motd"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"assign", "motd", "alpha"}, "motd assigned to alpha; mesh push alpha sends it\n"},
		{[]string{"assign", "motd", "alpha"}, "motd assigned to alpha; it changes no node's declaration: there is nothing to push\n"},
		{[]string{"unassign", "hello", "alpha"}, "hello unassigned from alpha; it changes the names every node serves and the declaration of alpha: mesh push alpha sends both (the names to all 2 nodes, in one roster message)\n"},
	} {
		args := append([]string{tc.args[0], "--dir", m.dir}, tc.args[1:]...)
		if out := mustRun(t, args...); out != tc.want {
			t.Errorf("mesh %s said %q, want %q", strings.Join(tc.args, " "), out, tc.want)
		}
	}
	// A push to beta alone, whose declaration did not change: the names
	// are all it sends, and it says so.
	out, _, code := runMesh(t, "push", "--dir", m.dir, "beta")
	if code != 0 || !regexp.MustCompile(`(?m)^names: roster (\d+) sent to every host \(2 nodes\)\n(.*\n)*names: roster (\d+) held by 2 of 2 nodes$`).MatchString(out) ||
		!strings.Contains(out, "beta: unchanged, not sent") {
		t.Errorf("push of the names alone: exit %d\n%s", code, out)
	}
}
