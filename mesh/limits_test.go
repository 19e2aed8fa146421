package mesh

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
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
		if _, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: n}); err != nil {
			t.Fatalf("token for %s within the limit: %v", n, err)
		}
	}
	_, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "delta"})
	if err == nil || spec.KindOf(err) != spec.ReplyRefused || !strings.Contains(err.Error(), "at most 3 nodes") || !strings.Contains(err.Error(), "2 unused tokens") {
		t.Fatalf("fourth node: %v (kind %q), want a refusal naming the limit of 3 and the 2 unused tokens", err, spec.KindOf(err))
	}
	// Another token for gamma takes no new place.
	if _, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "gamma"}); err != nil {
		t.Fatalf("a second token for gamma: %v", err)
	}
	ts, err := c.enrolment.listTokens(ctx, spec.TokenListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range ts.Tokens {
		if tok.Node == "beta" {
			if _, err := c.enrolment.revokeToken(ctx, spec.TokenRevokeRequest{ID: tok.ID}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "delta"}); err != nil {
		t.Fatalf("after beta's token was revoked: %v", err)
	}
	// An expired token holds no place either.
	clk.Add(DefaultTokenTTL + time.Minute)
	if _, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "epsilon"}); err != nil {
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
