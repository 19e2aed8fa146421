package host

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
)

// TestFactsSentNameTrustAndCertificates: the facts a host sends, with the
// mesh's root installed and a certificate served, name the anchor and the
// certificate as the trust and certificate kinds read them (their
// hostKind.facts), and are byte for byte the facts with those read
// directly (TrustInstalled, CertificatesHeld); with no declaration held
// they name the anchor and no certificate.
func TestFactsSentNameTrustAndCertificates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := fakeStore(t, trustStores[0], "/usr/sbin")
	_, _, c, _ := certEngine(t)
	e := NewEngine(Services{Root: root, CARoot: testRoot, certs: c})
	e.Appliers[spec.KindTrust] = trustApplier{root: root, caRoot: testRoot, refresh: (&stubRefresh{}).run}
	resources := []spec.Resource{trustResource("mesh"), certResource("web.alpha.internal", "/srv/web/tls")}
	for _, r := range func() []spec.ResourceResult { got, _, _ := e.Apply(ctx, resources, nil); return got }() {
		if r.Outcome != spec.Created || r.Error != "" {
			t.Fatalf("apply: %+v, want each created", r)
		}
	}
	_, serial := served(t, filepath.Join(root, "srv/web/tls"))
	anchor := trustStores[0].dir + "/mesh-mesh.crt"

	b := startEdgeBus(t, map[string]bool{"alpha": false})
	sub, err := b.full.SubscribeSync(spec.NodeSubject("alpha", spec.KindFacts))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.full.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := b.node(t, "alpha")
	for _, tc := range []struct {
		name  string
		held  *held
		certs int
	}{
		{"held", &held{decl: spec.Declaration{Resources: resources}}, 1},
		{"none held", nil, 0},
	} {
		a := &Agent{cfg: Config{Root: root, Panics: new(atomic.Uint64)}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			state: State{Node: "alpha", CARoot: testRoot}, engine: e, held: tc.held, watch: &engineWatch{node: "alpha", subnet: DefaultSubnet}}
		a.sendFacts(ctx, nc)
		msg, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: no facts sent: %v", tc.name, err)
		}
		var got spec.Facts
		if err := json.Unmarshal(msg.Data, &got); err != nil {
			t.Fatalf("%s: facts sent do not decode: %v", tc.name, err)
		}
		if got.TrustInstalled != anchor || len(got.Certificates) != tc.certs ||
			tc.certs == 1 && (got.Certificates[0].Name != "web.alpha.internal" || got.Certificates[0].Serial != serial) {
			t.Errorf("%s: facts name the anchor %q and certificates %+v, want %s and %d (serial %s)", tc.name, got.TrustInstalled, got.Certificates, anchor, tc.certs, serial)
		}
		want := got
		want.TrustInstalled = TrustInstalled(root, testRoot)
		want.Certificates = CertificatesHeld(root, tc.held.resources())
		body, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(msg.Data, body) {
			t.Errorf("%s: facts sent\n%s\nwant\n%s", tc.name, msg.Data, body)
		}
	}
}
