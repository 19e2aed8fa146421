package host_test

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// factsOf collects the facts the host at b sends, newest last.
func factsOf(t *testing.T, b *bench) func() []spec.Facts {
	t.Helper()
	ch := make(chan spec.Facts, 64)
	sub, err := b.nc.Subscribe(spec.NodeSubject("alpha", spec.KindFacts), func(m *nats.Msg) {
		var f spec.Facts
		if json.Unmarshal(m.Data, &f) == nil {
			ch <- f
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	b.nc.Flush()
	var seen []spec.Facts
	return func() []spec.Facts {
		for {
			select {
			case f := <-ch:
				seen = append(seen, f)
			default:
				return seen
			}
		}
	}
}

// waitFacts waits until the latest facts name the intermediate serial.
func waitFacts(t *testing.T, facts func() []spec.Facts, serial string) {
	t.Helper()
	poll.Until(t, 20*time.Second, "facts naming intermediate "+serial, func() error {
		fs := facts()
		if len(fs) == 0 {
			return errors.New("no facts yet")
		}
		last := fs[len(fs)-1].Intermediate
		if last == serial {
			return nil
		}
		return errors.New("the latest facts name " + last)
	})
}

func sameSerials(got []*x509.Certificate, want ...*x509.Certificate) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !got[i].Equal(want[i]) {
			return false
		}
	}
	return true
}

// TestHostTakesTheChain: the host keeps the CA chain its declaration
// carries (in its state, across a restart), says its intermediate's serial
// in its facts at once, keeps it through a declaration that carries none,
// takes the next one after the authority's intermediate is replaced, and
// refuses a declaration whose chain is not of its pinned root, applying
// nothing of it and keeping the chain it held.
func TestHostTakesTheChain(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	var agent *host.Agent
	b.prepare = func(a *host.Agent) { agent = a }
	facts := factsOf(t, b)
	b.start()
	first := b.auth.Intermediate()
	if got := agent.Intermediates(); len(got) != 0 {
		t.Fatalf("a host given no chain holds %d intermediates", len(got))
	}

	d := b.declaration(1, fileResource("/one", "1"))
	d.CAChain = chainPEM(first)
	b.publish(encode(t, d), nil)
	if r := b.report(); r.Refused != "" {
		t.Fatalf("a declaration with the mesh's chain was refused: %s", r.Refused)
	}
	if !sameSerials(agent.Intermediates(), first) {
		t.Fatal("the host does not hold the chain it was given")
	}
	waitFacts(t, facts, ca.SerialOf(first))

	// The authority's intermediate is replaced; a declaration without a
	// chain (an older controller's) leaves the held one as it is.
	if err := b.auth.Reissue([]string{"internal", spec.BusTLSName, "example.org"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	second := b.auth.Intermediate()
	b.publish(encode(t, b.declaration(2, fileResource("/two", "2"))), nil)
	if r := b.report(); r.Refused != "" {
		t.Fatalf("a declaration without a chain was refused: %s", r.Refused)
	}
	if !sameSerials(agent.Intermediates(), first) {
		t.Fatal("a declaration without a chain changed the chain held")
	}

	// The next declaration carries the new chain: taken, told at once.
	d = b.declaration(3, fileResource("/three", "3"))
	d.CAChain = chainPEM(second, first)
	b.publish(encode(t, d), nil)
	if r := b.report(); r.Refused != "" {
		t.Fatalf("the new chain was refused: %s", r.Refused)
	}
	if !sameSerials(agent.Intermediates(), second, first) {
		t.Fatal("the host does not hold the new chain")
	}
	waitFacts(t, facts, ca.SerialOf(second))
	st, _, err := host.ReadState(b.hostDir)
	if err != nil || st.CAChain != d.CAChain {
		t.Fatalf("state.json keeps chain %q (%v), want the one given", st.CAChain, err)
	}

	// Another authority's intermediate, and a chain that is not one:
	// refused like any bad declaration, nothing of it applied, the chain
	// held unchanged.
	other, err := ca.Create(t.TempDir(), "m", time.Now(), "internal")
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		chain, want string
	}{
		{chainPEM(other.Intermediate()), "the declaration's CA chain: intermediate " + ca.SerialOf(other.Intermediate()) + " does not verify against the pinned root"},
		{chainPEM(second, other.Intermediate()), "does not verify against the pinned root"},
		{chainPEM(b.auth.Root()), "is the root itself"},
		{"not a chain", "the declaration's CA chain: the chain has data after its last certificate, or is not PEM"},
	} {
		d := b.declaration(uint64(4+i), fileResource("/x", "x"))
		d.CAChain = tc.chain
		b.publish(encode(t, d), nil)
		if r := b.report(); !strings.Contains(r.Refused, tc.want) {
			t.Fatalf("chain %d: refused %q, want %q", i, r.Refused, tc.want)
		}
		if b.exists("/x") {
			t.Fatal("a declaration with a bad chain was applied")
		}
		if !sameSerials(agent.Intermediates(), second, first) {
			t.Fatal("a refused declaration changed the chain held")
		}
	}

	// A dry run with a bad chain says so, as the real one would be.
	d = b.declaration(9, fileResource("/x", "x"))
	d.Mode, d.CAChain = spec.ModePreview, chainPEM(other.Intermediate())
	raw := encode(t, d)
	pm := nats.NewMsg(spec.PreviewSubject("alpha"))
	pm.Data = raw
	pm.Header.Set(spec.SigHeader, base64.StdEncoding.EncodeToString(ed25519.Sign(b.key, raw)))
	if err := b.nc.PublishMsg(pm); err != nil {
		t.Fatal(err)
	}
	if r := b.report(); !r.Preview || !strings.Contains(r.Refused, "does not verify against the pinned root") {
		t.Fatalf("a dry run with another authority's chain: %+v", r)
	}

	// Started again, the host holds the kept chain and says so.
	b.stop()
	b.start()
	if !sameSerials(agent.Intermediates(), second, first) {
		t.Fatal("the host started again does not hold the kept chain")
	}
	waitFacts(t, facts, ca.SerialOf(second))
}

// TestBusVerifiedWithTheHeldChain: a bus that presents its leaf without the
// intermediate is reached by a host that holds the chain, the pinned root
// its only anchor.
func TestBusVerifiedWithTheHeldChain(t *testing.T) {
	t.Parallel()
	b := newBenchPresenting(t, true)
	st, _, err := host.ReadState(b.hostDir)
	if err != nil {
		t.Fatal(err)
	}
	st.CAChain = chainPEM(b.auth.Intermediate())
	if err := host.WriteState(b.hostDir, st); err != nil {
		t.Fatal(err)
	}
	b.start() // fails the test unless the host's heartbeat reaches the bus
	b.publish(encode(t, b.declaration(1, fileResource("/f", "f"))), nil)
	if r := b.report(); r.Refused != "" || !b.exists("/f") {
		t.Fatalf("a host on a bus verified through its held chain: %+v", r)
	}
}

// chainPEM is certs as a declaration's CA chain.
func chainPEM(certs ...*x509.Certificate) string { return string(ca.ChainPEM(certs...)) }
