package mesh

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go/jetstream"
)

// TestRecordedButNotPublishedIsPublishedAtStart: a declaration recorded as
// sent but never published (the controller killed between the two) is
// published at the controller's next start, once, with the recorded bytes
// and signature.
func TestRecordedButNotPublishedIsPublishedAtStart(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Now()}
	c, db := newController(t, clk)
	ctx := context.Background()
	decl, err := c.numbers.next(ctx, "alpha", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	decl.Resources = []spec.Resource{}
	body := mustJSON(t, decl)
	sig := ed25519.Sign(c.cfg.SignKey, body)
	if err := db.RecordDeclaration(ctx, store.Declaration{Node: "alpha", Seq: decl.Seq, Body: body, Sig: sig, Sent: decl.Issued, Expires: decl.Expires}); err != nil {
		t.Fatal(err)
	}
	stream, err := c.js.Stream(ctx, spec.DeclarationStream)
	if err != nil {
		t.Fatal(err)
	}
	held := func() (uint64, int) {
		t.Helper()
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(spec.DeclarationSubject("alpha")))
		if err != nil {
			t.Fatal(err)
		}
		n := int(info.State.Subjects[spec.DeclarationSubject("alpha")])
		if n == 0 {
			return 0, 0
		}
		m, err := stream.GetLastMsgForSubject(ctx, spec.DeclarationSubject("alpha"))
		if err != nil {
			t.Fatal(err)
		}
		var got spec.Declaration
		json.Unmarshal(m.Data, &got)
		if string(m.Data) != string(body) {
			t.Fatalf("the stream holds other bytes than those recorded")
		}
		return got.Seq, n
	}
	if seq, _ := held(); seq != 0 {
		t.Fatalf("the stream holds seq %d before the start", seq)
	}
	for range 2 { // a start, and another: published once
		if err := c.ensureDelivery(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if seq, n := held(); seq != decl.Seq || n != 1 {
		t.Fatalf("after two starts the stream holds seq %d in %d message(s), want seq %d once", seq, n, decl.Seq)
	}
}
