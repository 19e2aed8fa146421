package mesh

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nkeys"
)

// sealedEnrolment is an enrolment request for node under a new token,
// with sealKey as its sealing key, signed by the token's secret.
func sealedEnrolment(t *testing.T, c *Controller, node, sealKey string) (spec.Token, []byte) {
	t.Helper()
	res, err := c.enrolment.createToken(context.Background(), spec.TokenCreateRequest{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := spec.ParseToken(res.Token)
	if err != nil {
		t.Fatal(err)
	}
	nodeKey, _ := nkeys.CreateUser()
	nodePub, _ := nodeKey.PublicKey()
	return tok, enrolRequestSealed(t, tok, spec.EnrolRequest{Protocol: spec.Protocol, TokenID: tok.ID, Node: node,
		NKey: nodePub, SealKey: sealKey, WGKey: newWGKey(), Address: "127.0.0.2"})
}

// TestEnrolRecordsSealKey: a join records the host's sealing public key
// with the node, node show gives it, and what is sealed to it opens with
// the host's private half; a node removed and joined again holds the new
// join's key.
func TestEnrolRecordsSealKey(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	var keys []*seal.NodeKey
	for round := range 2 {
		k, err := seal.GenerateNodeKey()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
		_, body := sealedEnrolment(t, c, "beta", k.Public().String())
		if _, err := c.enrolment.enrol(ctx, body); err != nil {
			t.Fatalf("join %d: %v", round+1, err)
		}
		n, err := db.Node(ctx, "beta")
		if err != nil {
			t.Fatal(err)
		}
		if n.SealKey != k.Public().String() {
			t.Fatalf("join %d recorded sealing key %q, want %q", round+1, n.SealKey, k.Public())
		}
		shown, err := c.showNode(ctx, spec.NodeShowRequest{Name: "beta"})
		if err != nil {
			t.Fatal(err)
		}
		if shown.Node.SealKey != n.SealKey {
			t.Fatalf("node show gives sealing key %q, want %q", shown.Node.SealKey, n.SealKey)
		}
		pub, err := seal.ParseNodePublic(n.SealKey)
		if err != nil {
			t.Fatal(err)
		}
		text, err := seal.SealTo(pub, []byte("for beta"))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := k.Open(text); err != nil || string(got) != "for beta" {
			t.Fatalf("the host's key opens what is sealed to the recorded key: %q, %v", got, err)
		}
		if round == 0 {
			if _, err := c.enrolment.removeNode(ctx, spec.NodeRemoveRequest{Name: "beta"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if keys[0].Public() == keys[1].Public() {
		t.Fatal("the rejoin's key is the first join's")
	}
}

// TestEnrolRefusesMalformedSealKey: a join whose sealing key does not
// parse is the caller's mistake, named by its field, and joins nothing:
// the token stays open, and a good request under it goes through.
func TestEnrolRefusesMalformedSealKey(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	good, err := seal.GenerateNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	raw := strings.TrimPrefix(good.Public().String(), "x25519:")
	nodeKey, _ := nkeys.CreateUser()
	nodePub, _ := nodeKey.PublicKey()
	for _, key := range []string{
		"",
		raw,
		"x25519:",
		"x25519:nope",
		"x25519:" + base64.StdEncoding.EncodeToString(make([]byte, 32)),
		"x25519:" + base64.RawURLEncoding.EncodeToString(make([]byte, 16)),
		nodePub,
	} {
		tok, body := sealedEnrolment(t, c, "beta", key)
		_, err := c.enrolment.enrol(ctx, body)
		var caller callerError
		if !errors.As(err, &caller) || !strings.Contains(err.Error(), "seal_key") {
			t.Errorf("seal_key %q: %v, want the caller's mistake naming seal_key", key, err)
		}
		if _, err := db.Node(ctx, "beta"); err == nil {
			t.Fatalf("seal_key %q: beta joined", key)
		}
		if stored, err := db.Token(ctx, tok.ID); err != nil || !stored.Used.IsZero() {
			t.Fatalf("seal_key %q: token %s used (%v) by a refused join", key, tok.ID, err)
		}
		if _, err := c.enrolment.revokeToken(ctx, spec.TokenRevokeRequest{ID: tok.ID}); err != nil {
			t.Fatal(err)
		}
	}

	// The key is under the token's proof: one changed after signing is
	// refused, whatever it is.
	tok, body := sealedEnrolment(t, c, "beta", good.Public().String())
	other, _ := seal.GenerateNodeKey()
	changed := strings.Replace(string(body), good.Public().String(), other.Public().String(), 1)
	if _, err := c.enrolment.enrol(ctx, []byte(changed)); err == nil || !strings.Contains(err.Error(), "not signed by its secret") {
		t.Fatalf("a sealing key changed after signing: %v", err)
	}
	if _, err := c.enrolment.enrol(ctx, body); err != nil {
		t.Fatalf("token %s after the refusals: %v", tok.ID, err)
	}
}
