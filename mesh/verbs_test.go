package mesh

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// TestEveryVerbHasARow: every verb spec lists is served by exactly one row
// of the controller's table, with a redaction rule and the timeout spec
// gives it, and audited by that rule, never as "(unknown verb…)"; the table
// serves no verb spec does not list.
func TestEveryVerbHasARow(t *testing.T) {
	t.Parallel()
	c, _ := newController(t, &clock{now: time.Now()})
	rows := map[string]int{}
	for _, r := range c.verbRows() {
		rows[r.Name]++
		if _, ok := spec.LookupVerb(r.Name); !ok {
			t.Errorf("row %q serves a verb spec.Verbs() does not list", r.Name)
		}
	}
	for _, v := range spec.Verbs() {
		r, ok := c.verbs[v.Name]
		switch {
		case !ok:
			t.Errorf("verb %q has no row: add one to verbRows in verbs.go", v.Name)
			continue
		case rows[v.Name] != 1:
			t.Errorf("verb %q has %d rows", v.Name, rows[v.Name])
		case r.redact.rule == "":
			t.Errorf("verb %q has no redaction rule", v.Name)
		case r.Timeout <= 0 || r.Timeout != v.Timeout:
			t.Errorf("verb %q: timeout %s, spec says %s", v.Name, r.Timeout, v.Timeout)
		case r.call == nil:
			t.Errorf("verb %q has no handler", v.Name)
		}
		if r.redact.args != nil {
			if args := c.auditor.redact(context.Background(), v.Name, []byte(`{}`)); strings.Contains(args, "unknown verb") {
				t.Errorf("verb %q is audited as %s", v.Name, args)
			}
		}
	}
	if args := c.auditor.redact(context.Background(), "no.such", []byte(`{"secret":"x"}`)); args != `"(unknown verb: arguments not kept)"` {
		t.Errorf("a verb no row knows is audited as %s", args)
	}
}

// failingAudit is the real store but for reading the audit, which fails:
// the seam where the controller fails.
type failingAudit struct{ *store.DB }

func (failingAudit) AuditSince(context.Context, time.Time, int) ([]store.AuditEntry, error) {
	return nil, errors.New("read the audit: disk I/O error")
}

// TestRepliesCarryTheirKind: over the real bus, every answer's error says
// whose it is: the operator API's (a malformed request, a bad name, an
// unknown verb: caller; no such node, module, token or assignment:
// not_found; a token already used, a name taken: refused; a store that
// fails: failed, with the kind left off the wire), an enrolment's and a
// blob fetch's.
func TestRepliesCarryTheirKind(t *testing.T) {
	t.Parallel()
	c, _ := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store { return failingAudit{db} })
	ctx := context.Background()
	op := operatorConn(t, c)
	ask := func(nc *nats.Conn, subject string, body []byte) (string, error) {
		t.Helper()
		m, err := nc.Request(subject, body, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: no answer: %v", subject, err)
		}
		return string(m.Data), spec.DecodeReply(m.Data, nil)
	}
	check := func(what, wire string, err error, kind, says string) {
		t.Helper()
		var re *spec.ReplyError
		if !errors.As(err, &re) || re.Kind != kind || !strings.Contains(re.Message, says) {
			t.Errorf("%s: answered %s (%v), want kind %s saying %q", what, wire, err, kind, says)
		}
		if kind == spec.ReplyFailed && strings.Contains(wire, `"kind"`) {
			t.Errorf("%s: a failure names its kind on the wire: %s", what, wire)
		}
	}

	// Make a used token: beta joins with it.
	res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	used, _ := spec.ParseToken(res.Token)
	betaKey, _ := nkeys.CreateUser()
	if _, err := c.enrolment.enrol(ctx, enrolRequestWith(t, used, "beta", betaKey)); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		verb string
		body string
		kind string
		says string
	}{
		{spec.NodeShow.Name, `{"name":"alpha","extra":1}`, spec.ReplyCaller, "node.show: malformed request"},
		{spec.NodeShow.Name, `{"name":"Bad_Name"}`, spec.ReplyCaller, `node name "Bad_Name"`},
		{"no.such.verb", `{}`, spec.ReplyCaller, `unknown verb "no.such.verb"`},
		{spec.TokenCreate.Name, `{"node":"gamma","ttl":1000}`, spec.ReplyCaller, "a token lives from"},
		{spec.NodeShow.Name, `{"name":"ghost"}`, spec.ReplyNotFound, `no node called "ghost"`},
		{spec.NodeRemove.Name, `{"name":"ghost"}`, spec.ReplyNotFound, `no node called "ghost"`},
		{spec.ModuleShow.Name, `{"name":"ghost"}`, spec.ReplyNotFound, `no module called "ghost"`},
		{spec.Assign.Name, `{"module":"ghost","node":"alpha"}`, spec.ReplyNotFound, `no module called "ghost"`},
		{spec.Unassign.Name, `{"module":"ghost","node":"alpha"}`, spec.ReplyNotFound, `module "ghost" is not assigned to node "alpha"`},
		{spec.TokenRevoke.Name, `{"id":"tnope"}`, spec.ReplyNotFound, `no token "tnope"`},
		{spec.Push.Name, `{"nodes":["ghost"]}`, spec.ReplyNotFound, `no node called "ghost"`},
		{spec.NodeHold.Name, `{"node":"ghost","hold":true}`, spec.ReplyNotFound, `no node called "ghost"`},
		{spec.TokenRevoke.Name, `{"id":"` + used.ID + `"}`, spec.ReplyRefused, "was already used, by node \"beta\""},
		{spec.TokenCreate.Name, `{"node":"beta"}`, spec.ReplyRefused, `a node called "beta" is already in the mesh`},
		{spec.Audit.Name, `{}`, spec.ReplyFailed, "read the audit: disk I/O error"},
	} {
		wire, err := ask(op, spec.APISubject(tc.verb), []byte(tc.body))
		check(tc.verb+" "+tc.body, wire, err, tc.kind, tc.says)
	}

	// Enrolment: two open tokens for gamma; gamma joins with the first, so
	// the second is refused (the name is taken), and one that names
	// another node than its own is the caller's mistake.
	mk := func() spec.Token {
		res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "gamma"})
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := spec.ParseToken(res.Token)
		return tok
	}
	first, second := mk(), mk()
	if _, err := c.enrolment.enrol(ctx, enrolRequest(t, first, "gamma")); err != nil {
		t.Fatal(err)
	}
	secret, _ := nkeys.FromSeed([]byte(second.Secret))
	enc, err := busConn(t, c, secret, spec.EnrolInbox(second.ID), nil)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := ask(enc, spec.EnrolSubject, enrolRequest(t, second, "delta"))
	check("enrolment for another node", wire, err, spec.ReplyCaller, `is for node "gamma", not "delta"`)
	wire, err = ask(enc, spec.EnrolSubject, enrolRequest(t, second, "gamma"))
	check("enrolment of a name taken", wire, err, spec.ReplyRefused, `a node called "gamma" is already in the mesh`)

	// Blobs: beta asks with a malformed request, then for a blob it was
	// never sent.
	beta, err := busConn(t, c, betaKey, spec.NodeInbox("beta"), nil)
	if err != nil {
		t.Fatal(err)
	}
	wire, err = ask(beta, spec.NodeSubject("beta", spec.KindBlob), []byte(`{"digest":1}`))
	check("malformed blob request", wire, err, spec.ReplyCaller, "malformed blob request")
	wire, err = ask(beta, spec.NodeSubject("beta", spec.KindBlob), mustJSON(t, spec.BlobRequest{Digest: "sha256:" + strings.Repeat("0", 64)}))
	check("blob never sent", wire, err, spec.ReplyFailed, "blob sha256:")
}

// TestRoleQuestionIsNoVerb: the question every controller of a cluster
// answers on its own (spec.ControllerRoleSubject) is under the API's
// subjects, but the leader's controller neither answers it as an unknown
// verb nor audits it.
func TestRoleQuestionIsNoVerb(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	op := operatorConn(t, c)
	if m, err := op.Request(spec.ControllerRoleSubject, nil, 500*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("the controller answered the role question: %v %s", err, m.Data)
	}
	// A verb after it is audited: the audit is written by then.
	if _, err := op.Request(spec.APISubject(spec.NodeList.Name), []byte(`{}`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the verb after the question audited", func() error {
		es, err := db.AuditSince(context.Background(), time.Time{}, 100)
		if err != nil {
			return err
		}
		var verbs []string
		for _, e := range es {
			if strings.Contains(e.Verb, "cluster.role") {
				t.Fatalf("the role question was audited: %+v", e)
			}
			verbs = append(verbs, e.Verb)
		}
		if slices.Contains(verbs, spec.NodeList.Name) {
			return nil
		}
		return errors.New(strings.Join(verbs, ","))
	})
}
