package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// certificate is a certificate resource for name at path.
func certificate(name, path string) spec.Resource {
	return spec.Resource{Name: spec.ResourceName("t", spec.KindCertificate, path), Kind: spec.KindCertificate, Module: "t",
		Spec: &spec.CertificateSpec{Name: name, Path: path}}
}

// answerCSRs has the bench sign the host's CSRs from now on, as the
// controller does: it was away until then.
func (b *bench) answerCSRs() {
	b.t.Helper()
	sub, err := b.nc.Subscribe(spec.NodeSubject("alpha", spec.KindCSR), func(m *nats.Msg) {
		var req spec.CSRRequest
		if err := spec.Decode(m.Data, &req); err != nil {
			m.Respond(spec.EncodeReply(nil, err))
			return
		}
		der, err := req.DER()
		if err != nil {
			m.Respond(spec.EncodeReply(nil, err))
			return
		}
		csr, err := ca.ParseCSR(der)
		if err != nil {
			m.Respond(spec.EncodeReply(nil, err))
			return
		}
		leaf, err := b.auth.SignCSR(csr, csr.DNSNames, time.Now(), time.Hour)
		m.Respond(spec.EncodeReply(spec.CSRResult{Chain: leaf.Chain}, err))
	})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { sub.Unsubscribe() })
	if err := b.nc.Flush(); err != nil {
		b.t.Fatal(err)
	}
}

// TestOutsideFailureHeals: a certificate whose CSR no controller answers
// fails for a cause outside the node; once the controller answers, the
// host applies the kept declaration again by itself, within seconds and
// without a new declaration (its reconcile is an hour away), and reports
// it: the certificate is in place, the rest of the declaration applied
// again with it.
func TestOutsideFailureHeals(t *testing.T) {
	t.Parallel()
	b := newBench(t)
	b.start()
	cert := certificate("web.alpha.internal", "/srv/web/tls")
	file := fileResource("/f", "one")
	b.publish(encode(t, b.declaration(1, cert, file)), nil)
	outcomes := func(r spec.Report) map[string]string {
		out := map[string]string{}
		for _, res := range r.Results {
			out[res.Name] = res.Outcome + " " + res.Error
		}
		return out
	}
	r := b.report()
	if got := outcomes(r); r.Seq != 1 || !strings.Contains(got[cert.Name], "no controller answers on the bus") || got[file.Name] != spec.Created+" " {
		t.Fatalf("with no controller to sign: %+v, want the certificate failed for want of a controller, the file created", got)
	}

	b.answerCSRs()
	select {
	case r = <-b.reports:
	case <-time.After(20 * time.Second):
		t.Fatal("the host did not apply its declaration again within 20s of the controller answering")
	}
	if got := outcomes(r); r.Seq != 1 || got[cert.Name] != spec.Created+" " || got[file.Name] != spec.Unchanged+" " {
		t.Fatalf("the pass again: %+v, want declaration 1 with the certificate created, the file unchanged", got)
	}
	if _, err := os.Stat(filepath.Join(b.root, "srv/web/tls", spec.CertFile)); err != nil {
		t.Fatalf("the certificate is not in place: %v", err)
	}
}
