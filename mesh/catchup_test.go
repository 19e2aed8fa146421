package mesh

import (
	"context"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
)

// TestDeclarationRequestAnswered: a host asks for its node's last
// declaration on its own subject, under its own inbox alone: none sent yet
// is not found; then it is the stream's last, as signed, and it is
// republished to the node's own delivery subject as it is stored; a host
// that names its digest is answered held, with nothing of it.
func TestDeclarationRequestAnswered(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	key := joinWithKey(t, c, "beta")
	nc, err := busConn(t, c, key, spec.NodeInbox("beta"), nil)
	if err != nil {
		t.Fatal(err)
	}
	republished := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe(spec.DeclarationDelivery("beta"), republished)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ask := func(req spec.DeclarationRequest) (spec.DeclarationReply, error) {
		t.Helper()
		m, err := nc.Request(spec.NodeSubject("beta", spec.KindDeclaration), mustJSON(t, req), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r spec.DeclarationReply
		return r, spec.DecodeReply(m.Data, &r)
	}
	if _, err := ask(spec.DeclarationRequest{}); spec.KindOf(err) != spec.ReplyNotFound || !strings.Contains(err.Error(), "mesh push") {
		t.Fatalf("before any push: %v, want not found, saying what sends one", err)
	}
	ctx := context.Background()
	if _, err := c.push(ctx, spec.PushRequest{Nodes: []string{"beta"}}); err != nil {
		t.Fatal(err)
	}
	last, err := db.LastDeclaration(ctx, "beta")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-republished:
		if string(m.Data) != string(last.Body) {
			t.Fatalf("republished %s, want the declaration sent", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the declaration sent was not republished to beta's delivery subject")
	}
	r, err := ask(spec.DeclarationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	pub := c.cfg.SignKey.Public().(ed25519.PublicKey)
	if string(r.Body) != string(last.Body) || !ed25519.Verify(pub, r.Body, r.Sig) || r.Held {
		t.Fatalf("answered %+v, want the last declaration as signed", r)
	}
	if r, err := ask(spec.DeclarationRequest{Have: spec.ContentDigest(last.Body)}); err != nil || !r.Held || r.Body != nil {
		t.Fatalf("a host holding the last was answered %+v, %v; want held, no body", r, err)
	}
	if r, err := ask(spec.DeclarationRequest{Have: "sha256:other"}); err != nil || r.Held || string(r.Body) != string(last.Body) {
		t.Fatalf("a host holding another was answered %+v, %v; want the last", r, err)
	}
	body := mustJSON(t, spec.DeclarationRequest{})
	tryReflect(t, c, db, nc, spec.NodeInbox("beta"), spec.NodeSubject("beta", spec.KindDeclaration), same(foreign(spec.NodeInbox("beta")), body), body, 0)
}
