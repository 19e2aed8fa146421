package host

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/pebbletest"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go/jetstream"
)

// servedSerial is the serial of the certificate the edge at addr serves
// for name, verified against the roots in the PEM file root.
func servedSerial(root, addr, name string) (string, error) {
	pemBytes, err := os.ReadFile(root)
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: pool})
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16), nil
}

// TestEdgesShareOneCertificate: two edges, on two nodes, keep their
// certificates in the edges' bucket through the bus, each with the
// storage key sealed to its node. Both manage the same two public names at
// once; Pebble validates its challenges on the first edge's ports only,
// and the challenges are in the bucket for whichever edge answers them.
// Pebble takes one order a name, and both edges serve the same
// certificate (the same serial). Nothing in the bucket holds a key in the
// clear.
func TestEdgesShareOneCertificate(t *testing.T) {
	t.Parallel()
	addrs := [2][2]string{}
	for i := range addrs {
		addrs[i] = [2]string{testport.Addr(t, "127.0.0.1"), testport.Addr(t, "127.0.0.1")}
	}
	pb := pebbletest.Start(t, pebbletest.Port(t, addrs[0][0]), pebbletest.Port(t, addrs[0][1]))
	b := startEdgeBus(t, map[string]bool{"alpha": true, "beta": true})
	key := edgeKey(t)

	// Every key the edges write, as the controller's connection sees it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := b.kvOf(t).WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var written sync.Map
	go func() {
		for e := range w.Updates() {
			if e != nil {
				written.Store(e.Key(), e.Value())
			}
		}
	}()

	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "page") }))
	t.Cleanup(page.Close)
	names := []string{"shared-one.example.test", "shared-two.example.test"}
	backends := map[string]string{}
	for _, n := range names {
		backends[n] = page.URL
	}
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the edges' log:\n%s", logs.String())
		}
	})
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	for i, node := range []string{"alpha", "beta"} {
		nk, err := seal.GenerateNodeKey()
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := seal.SealTo(nk.Public(), key)
		if err != nil {
			t.Fatal(err)
		}
		g := newEdge(filepath.Join(t.TempDir(), EdgeDir), "", log.With("node", node))
		t.Cleanup(g.stop)
		g.share(b.node(t, node), nk)
		g.take(edgeRoster(t, backends))
		e := &spec.EdgeSpec{Name: "edge", HTTP: addrs[i][0], HTTPS: addrs[i][1], ACMECA: pb.Directory, Email: "ops@example.org", ACMERoots: pb.TLSRoots,
			StorageKey: sealed, StorageDigest: spec.SealedDigestPrefix + strings.Repeat("0", 64)}
		r := spec.Resource{Name: "edge:edge:edge", Kind: spec.KindEdge, Module: "edge", Spec: e}
		if res, err := (edgeApplier{edge: g}).Apply(context.Background(), r, nil); err != nil || res.Outcome != spec.Created {
			t.Fatalf("apply on %s: %+v, %v", node, res, err)
		}
		if _, ok := g.serves.magic.Storage.(*edgeLayered); !ok {
			t.Fatalf("the edge on %s keeps its certificates in %T, want the edges' bucket", node, g.serves.magic.Storage)
		}
	}

	for _, name := range names {
		var serials [2]string
		for i := range addrs {
			poll.Until(t, 90*time.Second, fmt.Sprintf("%s served by edge %d", name, i), func() error {
				s, err := servedSerial(pb.Root, addrs[i][1], name)
				serials[i] = s
				return err
			})
		}
		if serials[0] != serials[1] {
			t.Errorf("%s: the edges serve serials %s and %s, want one certificate", name, serials[0], serials[1])
		}
	}
	if n := pb.Orders(t); n != len(names) {
		t.Errorf("pebble took %d orders for %d public names on two edges, want one each", n, len(names))
	}

	tokens := 0
	written.Range(func(k, v any) bool {
		key := k.(string)
		if strings.Contains(key, "challenge_tokens") {
			tokens++
		}
		for _, clear := range []string{"PRIVATE KEY", "BEGIN CERTIFICATE", "\"token\""} {
			if strings.Contains(string(v.([]byte)), clear) {
				t.Errorf("the bucket holds %s with %q in the clear", key, clear)
			}
		}
		return true
	})
	if tokens == 0 {
		t.Error("no challenge was kept in the bucket for the other edge to answer")
	}
}
