package mesh

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A token past the fleet the mesh admits is refused when it is made,
// naming the limit and what frees a place, instead of a join failing
// half-way at its consumer. A revoked token and a removed node give their
// places back; a token for a name that already holds a place takes none.
func TestTokenBeyondMaxNodesRefused(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, _ := newControllerCfg(t, clk, nil, func(cfg *Config) { cfg.MaxNodes = 3 })
	ctx := context.Background()
	// alpha (genesis) holds the first place.
	for _, n := range []string{"beta", "gamma"} {
		if _, err := c.createToken(ctx, spec.TokenCreateRequest{Node: n}); err != nil {
			t.Fatalf("token for %s within the limit: %v", n, err)
		}
	}
	_, err := c.createToken(ctx, spec.TokenCreateRequest{Node: "delta"})
	if err == nil || spec.KindOf(err) != spec.ReplyRefused || !strings.Contains(err.Error(), "at most 3 nodes") || !strings.Contains(err.Error(), "2 unused tokens") {
		t.Fatalf("fourth node: %v (kind %q), want a refusal naming the limit of 3 and the 2 unused tokens", err, spec.KindOf(err))
	}
	// Another token for gamma takes no new place.
	if _, err := c.createToken(ctx, spec.TokenCreateRequest{Node: "gamma"}); err != nil {
		t.Fatalf("a second token for gamma: %v", err)
	}
	ts, err := c.listTokens(ctx, spec.TokenListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range ts.Tokens {
		if tok.Node == "beta" {
			if _, err := c.revokeToken(ctx, spec.TokenRevokeRequest{ID: tok.ID}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := c.createToken(ctx, spec.TokenCreateRequest{Node: "delta"}); err != nil {
		t.Fatalf("after beta's token was revoked: %v", err)
	}
	// An expired token holds no place either.
	clk.Add(DefaultTokenTTL + time.Minute)
	if _, err := c.createToken(ctx, spec.TokenCreateRequest{Node: "epsilon"}); err != nil {
		t.Fatalf("after the tokens expired: %v", err)
	}
}

// The declaration stream carries the consumer limit the controller was
// given, set on the stream itself.
func TestStreamCarriesMaxNodes(t *testing.T) {
	t.Parallel()
	c, _ := newController(t, &clock{now: time.Now()})
	s, err := c.js.Stream(context.Background(), spec.DeclarationStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxConsumers; got != spec.MaxNodes {
		t.Fatalf("stream %s: max_consumers %d, want %d", spec.DeclarationStream, got, spec.MaxNodes)
	}
}

// The limit set on the stream lifts nats-server's default cap per stream
// (1,000; here the server's default is made 3 so the test needs a handful
// of consumers, not a thousand): without it the fourth node's consumer is
// refused with "maximum consumers limit reached", with it the fourth and
// fifth are made and the sixth is refused at the stream's own limit.
func TestStreamLimitLiftsServerDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		maxNodes  int
		made      int // consumers that must be made
		refusedAt int // the first refused, 0 for none
	}{
		{"server default", 0, 3, 4},
		{"stream limit", 5, 5, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true, JetStream: true, StoreDir: t.TempDir()}
			opts.JetStreamLimits.DefaultMaxConsumers = 3
			ns, err := server.NewServer(opts)
			if err != nil {
				t.Fatal(err)
			}
			go ns.Start()
			t.Cleanup(ns.Shutdown)
			if !ns.ReadyForConnections(10 * time.Second) {
				t.Fatal("nats-server not ready")
			}
			nc, err := nats.Connect(ns.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := ensureStream(ctx, js, tc.maxNodes); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= tc.refusedAt; i++ {
				err := ensureConsumer(ctx, js, fmt.Sprintf("n%d", i), spec.Protocol)
				switch {
				case i <= tc.made && err != nil:
					t.Fatalf("consumer %d: %v", i, err)
				case i == tc.refusedAt && (err == nil || !strings.Contains(err.Error(), "maximum consumers limit reached")):
					t.Fatalf("consumer %d: %v, want the consumer limit", i, err)
				}
			}
		})
	}
}
