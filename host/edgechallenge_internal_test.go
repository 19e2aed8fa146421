package host

import (
	"slices"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/testport"
)

// TestEdgeAnswersEachChallengeType: an edge obtains its certificate by
// HTTP-01 on its HTTP listener when that is the only challenge Pebble can
// validate, and by TLS-ALPN-01 on its HTTPS listener when that is. Pebble
// validates the other type on a port the test holds and nothing listens
// on, so that challenge fails to connect. acmez picks the type it tries
// first at random and, when that one fails, orders again with the other:
// whichever it picks, the certificate comes from the one possible.
func TestEdgeAnswersEachChallengeType(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		challenge, name string
		// validating are the ports Pebble validates HTTP-01 and
		// TLS-ALPN-01 on, given the edge's and a closed one.
		validating func(httpPort, httpsPort, closed int) (int, int)
	}{
		{"http-01", "chal-http.example.test", func(httpPort, _, closed int) (int, int) { return httpPort, closed }},
		{"tls-alpn-01", "chal-alpn.example.test", func(_, httpsPort, closed int) (int, int) { return closed, httpsPort }},
	} {
		t.Run(c.challenge, func(t *testing.T) {
			t.Parallel()
			closed := testport.Port(t)
			r := newEdgeRigValidating(t, func(httpPort, httpsPort int) (int, int) { return c.validating(httpPort, httpsPort, closed) })
			body := "answered by " + c.challenge
			r.edge(t, edgeRenew{}, map[string]string{c.name: edgePage(t, body)})
			start := time.Now()
			leaf := r.waitLeaf(t, c.name, 60*time.Second)
			if !slices.Contains(leaf.DNSNames, c.name) {
				t.Fatalf("the edge served a certificate for %v, want %s", leaf.DNSNames, c.name)
			}
			if n := r.pb.Issued(t); n != 1 {
				t.Errorf("pebble issued %d certificates, want 1", n)
			}
			t.Logf("obtained by %s alone %s after the edge was configured, in %d orders (2: the other type was tried first and failed)",
				c.challenge, time.Since(start).Round(time.Millisecond), r.pb.Orders(t))

			// The load requests once before it sees its end.
			load := r.load(c.name, body)
			load.end()
			if served, failed := load.state(); len(served) != 1 {
				t.Errorf("a page through the edge: %v, want %q", failed, body)
			}
		})
	}
}
