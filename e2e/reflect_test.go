package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/host"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// auditVerbs are the verbs of the audit's rows, oldest first, but the
// audit's own reads.
func auditVerbs(t *testing.T, dir string) []string {
	t.Helper()
	out, errOut, code := runMesh(t, "audit", "--dir", dir, "--json")
	if code != 0 {
		t.Fatalf("mesh audit: exit %d: %s", code, errOut)
	}
	var es []spec.AuditEntry
	if err := json.Unmarshal([]byte(out), &es); err != nil {
		t.Fatalf("mesh audit --json: %v\n%s", err, out)
	}
	var verbs []string
	for _, e := range es {
		if e.Verb != spec.Audit.Name {
			verbs = append(verbs, e.Verb)
		}
	}
	return verbs
}

// TestNodeCannotMakeTheControllerAnswerElsewhere: with alpha's own
// credential, blob requests whose reply subject is alpha's declaration or
// delivery subject or the operator API's node.remove are dropped: the audit
// gains no row, /metrics counts them, the log names the first.
func TestNodeCannotMakeTheControllerAnswerElsewhere(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	nc, _, err := nodeConn(t, m, m.dir)
	if err != nil {
		t.Fatal(err)
	}
	before := auditVerbs(t, m.dir)
	refused := m.metric(t, "mesh_replies_refused_total")
	body := []byte(`{"digest":"sha256:` + strings.Repeat("0", 64) + `"}`)
	targets := []string{spec.DeclarationSubject("alpha"), spec.DeclarationDelivery("alpha"), spec.APISubject(spec.NodeRemove.Name)}
	for _, reply := range targets {
		if err := nc.PublishRequest(spec.NodeSubject("alpha", spec.KindBlob), reply, body); err != nil {
			t.Fatal(err)
		}
	}
	// Answered after the others (one subscription takes them in order),
	// and on alpha's own inbox.
	msg, err := nc.Request(spec.NodeSubject("alpha", spec.KindBlob), body, 10*time.Second)
	if err != nil {
		t.Fatalf("a blob request on alpha's own inbox: %v", err)
	}
	if !strings.Contains(string(msg.Data), "blob sha256:") {
		t.Errorf("a blob request on alpha's own inbox answered %s", msg.Data)
	}
	if got := m.metric(t, "mesh_replies_refused_total") - refused; got != len(targets) {
		t.Errorf("mesh_replies_refused_total grew by %d, want %d", got, len(targets))
	}
	if after := auditVerbs(t, m.dir); len(after) != len(before) {
		t.Errorf("the audit grew from %v to %v", before, after)
	}
	if got := m.nodeNames(t); got != "alpha" {
		t.Errorf("nodes: %s", got)
	}
	// The log names the first drop; the next ones from the same node within
	// ten seconds are counted, not logged, so a flood cannot bury the log.
	out := m.d.out.String()
	if !strings.Contains(out, "request dropped") || !strings.Contains(out, "reply="+targets[0]) {
		t.Errorf("the controller's log does not name the first dropped request and its reply subject:\n%s", out)
	}
	if strings.Count(out, "request dropped") != 1 {
		t.Errorf("the controller logged %d drops from one node within seconds, want 1:\n%s", strings.Count(out, "request dropped"), out)
	}
}

// TestRevokedTokenIsRefusedAtConnect: once mesh token revoke returns, the
// token's secret is refused by the bus within a second, and a connection
// that held it is closed.
func TestRevokedTokenIsRefusedAtConnect(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	tok := mustParse(t, m.token(t, "gamma"))
	kp, err := nkeys.FromSeed([]byte(tok.Secret))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	connect := func() (*nats.Conn, error) {
		return nats.Connect(strings.Join(tok.Bus, ","), nats.Nkey(pub, kp.Sign),
			nats.Secure(ca.PinnedTLS(tok.Pin, spec.BusTLSName, nil)), nats.TLSHandshakeFirst(), nats.NoReconnect(),
			// nats.go's default of 2 s for the dial and the handshake was
			// too short once under the race detector on a loaded machine.
			nats.Timeout(10*time.Second))
	}
	held, err := connect()
	if err != nil {
		t.Fatalf("an open token's secret is refused: %v", err)
	}
	defer held.Close()
	if _, errOut, code := runMesh(t, "token", "revoke", "--dir", m.dir, tok.ID); code != 0 {
		t.Fatalf("token revoke: %s", errOut)
	}
	poll.Until(t, time.Second, "the revoked token's secret refused at connect", func() error {
		nc, err := connect()
		if err == nil {
			nc.Close()
			return errors.New("connected")
		}
		if errors.Is(err, nats.ErrAuthorization) {
			return nil
		}
		return err
	})
	poll.Until(t, time.Second, "the connection that held the revoked secret closed", func() error {
		if held.IsClosed() {
			return nil
		}
		return errors.New(held.Status().String())
	})
}

// TestJoinHearsItsAnswerAsTheTokenLeaves: the controller withdraws a used
// token's user, closing the joining host's connection, right after it
// answered; every join still hears its answer, and the used token's secret
// is refused at connect from then on. "Right after" is the change of the
// bus's users that follows the answer: a connection made in between may
// still get in (the token is used in the store before the answer, so it
// enrols nothing), and the test waits a bounded while for the server's
// refusal.
func TestJoinHearsItsAnswerAsTheTokenLeaves(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	for i := range 10 {
		tok := mustParse(t, m.token(t, fmt.Sprintf("n%d", i)))
		dir := filepath.Join(t.TempDir(), "host")
		if err := host.Join(context.Background(), host.JoinConfig{Dir: dir, Token: tok, Address: "127.0.0.3", Now: time.Now()}); err != nil {
			t.Fatalf("join %d: %v", i, err)
		}
		kp, _ := nkeys.FromSeed([]byte(tok.Secret))
		pub, _ := kp.PublicKey()
		// A connection the server closes before it answers (its auth
		// timeout, on a loaded machine) says nothing either way: only the
		// server's own verdict ends the wait.
		poll.Until(t, 10*time.Second, fmt.Sprintf("token %s's secret refused at connect after the join used it", tok.ID), func() error {
			nc, err := nats.Connect(strings.Join(tok.Bus, ","), nats.Nkey(pub, kp.Sign),
				nats.Secure(ca.PinnedTLS(tok.Pin, spec.BusTLSName, nil)), nats.TLSHandshakeFirst(), nats.NoReconnect())
			if err == nil {
				nc.Close()
				return errors.New("it connects")
			}
			if errors.Is(err, nats.ErrAuthorization) {
				return nil
			}
			return err
		})
	}
}
