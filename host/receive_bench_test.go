package host_test

import (
	"crypto/ed25519"
	"testing"
)

// BenchmarkReceive327 is one delivery of 327 resources that the machine
// already holds, end to end on a real bus: published on the node's stream,
// verified, decoded, applied (nothing differs), recorded in state.json and
// reported. The declaration is built and signed outside the timer.
func BenchmarkReceive327(b *testing.B) {
	r := newBench(b)
	r.start()
	resources := declaration327()
	r.publish(encode(b, r.declaration(1, resources...)), nil)
	if rep := r.report(); rep.Seq != 1 || rep.Refused != "" || len(rep.Results) != len(resources) {
		b.Fatalf("the first delivery: seq %d refused %q, %d results", rep.Seq, rep.Refused, len(rep.Results))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		raw := encode(b, r.declaration(uint64(i)+2, resources...))
		sig := ed25519.Sign(r.key, raw)
		b.StartTimer()
		r.publish(raw, sig)
		rep := r.report()
		if rep.Seq != uint64(i)+2 || rep.Refused != "" || rep.Writes != 0 {
			b.Fatalf("delivery %d: seq %d refused %q, %d writes", i+2, rep.Seq, rep.Refused, rep.Writes)
		}
	}
}

// BenchmarkReceiveWithChain is BenchmarkReceive327 with no resources and
// the mesh's CA chain in every declaration: what checking the chain
// against the pinned root adds to a delivery (compare with the same run
// without the chain, -bench 'ReceiveWithChain|ReceiveNoChain').
func BenchmarkReceiveWithChain(b *testing.B) { benchChain(b, true) }

// BenchmarkReceiveNoChain is BenchmarkReceiveWithChain without the chain.
func BenchmarkReceiveNoChain(b *testing.B) { benchChain(b, false) }

func benchChain(b *testing.B, withChain bool) {
	r := newBench(b)
	r.start()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		d := r.declaration(uint64(i) + 1)
		if withChain {
			d.CAChain = string(r.auth.IntermediatePEM())
		}
		raw := encode(b, d)
		sig := ed25519.Sign(r.key, raw)
		b.StartTimer()
		r.publish(raw, sig)
		if rep := r.report(); rep.Seq != uint64(i)+1 || rep.Refused != "" {
			b.Fatalf("delivery %d: seq %d refused %q", i+1, rep.Seq, rep.Refused)
		}
	}
}
