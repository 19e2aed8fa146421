package journal_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/internal/testport"
	"github.com/mesh-fleet/mesh/journal"
)

// startBuses starts n buses on loopback, routed as one cluster when
// n > 1, JetStream syncing at syncInterval (zero: every write), and
// returns how to reach the first in process once each routes to every
// other and JetStream answers.
func startBuses(t testing.TB, n int, syncInterval time.Duration) func(context.Context) (jetstream.JetStream, error) {
	t.Helper()
	auth, err := ca.Create(t.TempDir(), "test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := nkeys.CreateUser()
	pub, _ := key.PublicKey()
	routes := make([]string, n)
	for i := range routes {
		routes[i] = testport.Addr(t, "127.0.0.1")
	}
	var srvs []*broker.Server
	for i := range n {
		cert, err := auth.IssueServer([]string{"mesh-bus"}, []net.IP{net.ParseIP("127.0.0.1")}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg := broker.Config{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), SyncInterval: syncInterval,
			TLS:   &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			Users: []broker.User{{NKey: pub, Full: true}}}
		if n > 1 {
			cfg.Cluster = &broker.Cluster{
				Name: "mesh", ServerName: fmt.Sprintf("c%d", i), Listen: routes[i], Peers: routes,
				Cert: cert, Root: auth.Root(), TLSName: "mesh-bus", User: "route", Password: "secret",
			}
		}
		srv, err := broker.New(cfg, quiet())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case <-srv.Ready():
		case err := <-done:
			t.Fatalf("bus %d stopped: %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("bus %d not ready after 30s", i)
		}
		srvs = append(srvs, srv)
	}
	for i, srv := range srvs {
		poll.Until(t, 30*time.Second, fmt.Sprintf("bus %d routes to every other", i), func() error {
			if len(srv.Peers()) == n-1 {
				return nil
			}
			return fmt.Errorf("routes to %q", srv.Peers())
		})
	}
	connect := func(context.Context) (jetstream.JetStream, error) {
		nc, err := nats.Connect("", nats.InProcessServer(srvs[0].NATS()), nats.Nkey(pub, key.Sign))
		if err != nil {
			return nil, err
		}
		t.Cleanup(nc.Close)
		return jetstream.New(nc)
	}
	// A cluster's JetStream answers once its servers have elected the
	// leader of their metadata.
	poll.Until(t, 60*time.Second, "JetStream answers", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		js, err := connect(ctx)
		if err != nil {
			return err
		}
		_, err = js.AccountInfo(ctx)
		return err
	})
	return connect
}

// BenchmarkJournalWriteReplicas times writes through the log (one KV
// write and its apply each) kept by one server against three: one
// server syncing every write (a single controller), one syncing every
// two minutes (nats-server's own default, which a cluster refuses), and
// three servers syncing every write with the log on all three (a
// clustered controller, the writer on the first server), and the same
// with each write fenced by the lease (the leader of three, as a
// clustered controller writes). It logs each
// rate's ratio to the single controller's.
func BenchmarkJournalWriteReplicas(b *testing.B) {
	cases := []struct {
		name     string
		servers  int
		sync     time.Duration
		replicas int
	}{
		{"servers=1/sync=always/R1", 1, 0, 1},
		{"servers=1/sync=2m/R1", 1, 2 * time.Minute, 1},
		{"servers=3/sync=always/R3", 3, 0, 3},
		{"servers=3/sync=always/R3/fenced", 3, 0, 3},
	}
	views := make([]*journal.View, len(cases))
	for i, c := range cases {
		if strings.HasSuffix(c.name, "/fenced") {
			// The leader's journal: every write a batch fenced by the lease.
			_, cs, lead := fencedControllers(b)
			views[i] = cs[lead].view
			continue
		}
		connect := startBuses(b, c.servers, c.sync)
		views[i], _ = runningWith(b, filepath.Join(b.TempDir(), "mesh.db"), connect, journal.Config{Replicas: c.replicas})
	}
	for _, writers := range []int{1, 8} {
		rates := make([]float64, len(cases))
		for i, c := range cases {
			b.Run(fmt.Sprintf("%s/writers=%d", c.name, writers), func(b *testing.B) {
				benchWrites(b, views[i], writers)
				b.StopTimer()
				rates[i] = float64(b.N) / b.Elapsed().Seconds()
				b.ReportMetric(rates[i], "writes/s")
			})
		}
		for i, c := range cases[1:] {
			if rates[0] > 0 {
				b.Logf("writers=%d: %s %.0f writes/s, %.2f times %s's %.0f", writers, c.name, rates[i+1], rates[i+1]/rates[0], cases[0].name, rates[0])
			}
		}
	}
}
