package mesh

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// busConn connects to the controller's bus over TCP and TLS, as a host
// does, as key's user, with inbox (when given) as its inbox prefix. The
// bus's asynchronous errors, permission violations among them, go to errs
// when given.
func busConn(t *testing.T, c *Controller, key nkeys.KeyPair, inbox string, errs chan error) (*nats.Conn, error) {
	t.Helper()
	pub, _ := key.PublicKey()
	opts := []nats.Option{nats.Nkey(pub, key.Sign), nats.NoReconnect(),
		nats.Secure(ca.ClientTLS(c.deps.CA.Root(), spec.BusTLSName)), nats.TLSHandshakeFirst(),
		// Not nats.go's 2 s for the dial and the handshake: short for a
		// loaded two-core machine running 8 packages at once.
		nats.Timeout(10 * time.Second)}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	if errs != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	}
	nc, err := nats.Connect("nats://"+c.deps.Bus.Addr(), opts...)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, err
}

// operatorConn calls the API as the CLI does, with its inbox under
// _OPERATOR. It holds the controller's full key, which may publish on the
// API subjects as an operator's may.
func operatorConn(t *testing.T, c *Controller) *nats.Conn {
	t.Helper()
	nc, err := busConn(t, c, c.cfg.Keys.Full, spec.OperatorInbox, nil)
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// joinWithKey enrols node through a token, as a host does, and returns the
// node's key.
func joinWithKey(t *testing.T, c *Controller, node string) nkeys.KeyPair {
	t.Helper()
	res, err := c.enrolment.createToken(context.Background(), spec.TokenCreateRequest{Node: node})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := spec.ParseToken(res.Token)
	key, _ := nkeys.CreateUser()
	if _, err := c.enrolment.enrol(context.Background(), enrolRequestWith(t, tok, node, key)); err != nil {
		t.Fatal(err)
	}
	return key
}

// metric reads one counter from the controller's /metrics.
func metric(t *testing.T, c *Controller, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + c.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	// A value is a float: a count of a million or more is written with
	// an exponent.
	match := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(body)
	if match == nil {
		t.Fatalf("metric %s not in /metrics", name)
	}
	n, err := strconv.ParseFloat(string(match[1]), 64)
	if err != nil {
		t.Fatalf("metric %s: %v", name, err)
	}
	return int(n)
}

func auditRows(t *testing.T, db *store.DB) int {
	t.Helper()
	es, err := db.AuditSince(context.Background(), time.Time{}, 100000)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// foreign are reply subjects that belong to no requester but the one that
// holds own: another node's declaration and delivery subjects, the operator
// API, another node's inbox, the operator's inbox, an enrolment inbox, and,
// under the requester's own prefix, a wildcard and the bare prefix.
func foreign(own string) []string {
	all := []string{
		spec.DeclarationSubject("alpha"),
		spec.DeclarationDelivery("alpha"),
		spec.APISubject(spec.NodeRemove.Name),
		spec.NodeInbox("alpha") + ".x",
		spec.OperatorInbox + ".x",
		spec.EnrolInbox("tother") + ".x",
		own + ".*",
		own,
	}
	var out []string
	for _, s := range all {
		if !strings.HasPrefix(s, own+".") || strings.HasSuffix(s, "*") {
			out = append(out, s)
		}
	}
	return out
}

// attempt is one request with a reply subject that is not the requester's.
type attempt struct {
	reply string
	body  []byte
}

// tryReflect has nc send each attempt on subject, then one request whose
// reply is under its own inbox (own): that one is answered after the
// controller handled the others, since one subscription takes them in
// order. It checks that no attempt was answered anywhere (a spy holding the
// controller's full key listens on every reply subject), that each was
// counted in mesh_replies_refused_total, and that the audit grew by
// audited rows only. It returns the answer to the last request.
func tryReflect(t *testing.T, c *Controller, db *store.DB, nc *nats.Conn, own, subject string, attempts []attempt, last []byte, audited int) spec.Reply {
	t.Helper()
	spy, err := busConn(t, c, c.cfg.Keys.Full, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	heard := make(chan *nats.Msg, 256)
	for _, s := range append([]string{own + ".>"}, replies(attempts)...) {
		if _, err := spy.ChanSubscribe(s, heard); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	refused, rows := metric(t, c, "mesh_replies_refused_total"), auditRows(t, db)

	barrier := own + ".barrier"
	answer, err := nc.SubscribeSync(barrier)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range attempts {
		if err := nc.PublishRequest(subject, a.reply, a.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.PublishRequest(subject, barrier, last); err != nil {
		t.Fatal(err)
	}
	m, err := answer.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("the request with its own inbox was not answered: %v", err)
	}
	var reply spec.Reply
	if err := json.Unmarshal(m.Data, &reply); err != nil {
		t.Fatal(err)
	}
	// The spy hears the controller's answers in the order it sent them:
	// anything before the barrier's answer was sent to a reply subject that
	// was not the requester's. (It also hears the requests themselves where
	// they go to a subject it listens on: those carry a reply subject, and
	// the controller's answers never do.)
	for seen := false; !seen; {
		select {
		case m := <-heard:
			if m.Reply != "" {
				continue
			}
			if m.Subject == barrier {
				seen = true
				break
			}
			t.Errorf("the controller answered on %s: %s", m.Subject, m.Data)
		case <-time.After(10 * time.Second):
			t.Fatal("the spy did not hear the answer to the request with its own inbox")
		}
	}
	for {
		select {
		case m := <-heard:
			if m.Reply == "" && m.Subject != barrier {
				t.Errorf("the controller answered on %s: %s", m.Subject, m.Data)
			}
			continue
		default:
		}
		break
	}
	if got := metric(t, c, "mesh_replies_refused_total") - refused; got != len(attempts) {
		t.Errorf("mesh_replies_refused_total grew by %d, want %d (one per request with a reply subject not its own)", got, len(attempts))
	}
	if got := auditRows(t, db) - rows; got != audited {
		t.Errorf("the audit grew by %d rows, want %d", got, audited)
	}
	return reply
}

func replies(as []attempt) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.reply)
	}
	return out
}

func same(replies []string, body []byte) []attempt {
	var out []attempt
	for _, r := range replies {
		out = append(out, attempt{reply: r, body: body})
	}
	return out
}

// TestNodeCannotMakeTheControllerAnswerElsewhere: a node's blob request
// with the reply subject of another node's declarations or delivery, of the
// operator API, or of another inbox is dropped: answered nowhere, audited
// nowhere, counted.
func TestNodeCannotMakeTheControllerAnswerElsewhere(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	key := joinWithKey(t, c, "beta")
	nc, err := busConn(t, c, key, spec.NodeInbox("beta"), nil)
	if err != nil {
		t.Fatal(err)
	}
	own := spec.NodeInbox("beta")
	body := mustJSON(t, spec.BlobRequest{Digest: "sha256:" + strings.Repeat("0", 64)})
	reply := tryReflect(t, c, db, nc, own, spec.NodeSubject("beta", spec.KindBlob), same(foreign(own), body), body, 0)
	if !strings.Contains(reply.Error, "blob sha256:") {
		t.Errorf("the blob request with its own inbox: %+v, want the refusal of a blob not declared", reply)
	}
	if n := onStream(t, c, "alpha"); n != 0 {
		t.Errorf("alpha's declaration subject holds %d message(s)", n)
	}
	if nodes, _ := db.Nodes(context.Background()); len(nodes) != 2 {
		t.Errorf("%d nodes, want alpha and beta", len(nodes))
	}
}

// TestPanickedRequestIsAnsweredOnlyToItsRequester: the failure answered
// for a request whose handler panicked goes through the same rule.
func TestPanickedRequestIsAnsweredOnlyToItsRequester(t *testing.T) {
	t.Parallel()
	c, db := newControllerWith(t, &clock{now: time.Now()}, func(db *store.DB) Store {
		return panickyStore{DB: db, facts: true}
	})
	key := joinWithKey(t, c, "beta")
	nc, err := busConn(t, c, key, spec.NodeInbox("beta"), nil)
	if err != nil {
		t.Fatal(err)
	}
	own := spec.NodeInbox("beta")
	facts := mustJSON(t, spec.Facts{Node: "beta", Time: time.Now(), Kernel: "injected"})
	attempts := same(foreign(own), facts)
	reply := tryReflect(t, c, db, nc, own, spec.NodeSubject("beta", spec.KindFacts), attempts, facts, 0)
	if !strings.Contains(reply.Error, "internal error") {
		t.Errorf("the panicked request with its own inbox: %+v, want a failure naming an internal error", reply)
	}
	if got := c.cfg.Panics.Load(); got != uint64(len(attempts)+1) {
		t.Errorf("%d panics, want %d: every message reached its handler", got, len(attempts)+1)
	}
}

// TestEnrolmentCannotMakeTheControllerAnswerElsewhere: an open token's
// secret, sending a valid enrolment request with a reply subject that is
// not its token's enrolment inbox, is dropped and nothing is done for it;
// so is a request that names another token than the secret that signed it.
// Once its own request is answered, the used token's connection is closed
// and its secret refused at connect.
func TestEnrolmentCannotMakeTheControllerAnswerElsewhere(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	mk := func(node string) spec.Token {
		res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: node})
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := spec.ParseToken(res.Token)
		return tok
	}
	tok, other := mk("gamma"), mk("delta")
	secret, _ := nkeys.FromSeed([]byte(tok.Secret))
	closed := make(chan struct{})
	nc, err := busConn(t, c, secret, spec.EnrolInbox(tok.ID), nil)
	if err != nil {
		t.Fatal(err)
	}
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })

	own := spec.EnrolInbox(tok.ID)
	nodeKey, _ := nkeys.CreateUser()
	body := enrolRequestWith(t, tok, "gamma", nodeKey)
	claimsOther := other
	claimsOther.Secret = tok.Secret
	attempts := append(same(foreign(own), body),
		attempt{reply: spec.EnrolInbox(other.ID) + ".x", body: enrolRequestWith(t, claimsOther, "delta", nodeKey)})
	reply := tryReflect(t, c, db, nc, own, spec.EnrolSubject, attempts, body, 0)
	if reply.Error != "" {
		t.Fatalf("the enrolment with its own inbox was refused: %s (a dropped request was acted on?)", reply.Error)
	}
	if nodes, _ := db.Nodes(ctx); len(nodes) != 2 {
		t.Errorf("%d nodes, want alpha and gamma", len(nodes))
	}
	if o, _ := db.Token(ctx, other.ID); !o.Used.IsZero() {
		t.Error("the token another secret claimed was used")
	}

	// The used token's secret leaves the bus with its connection.
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Error("the used token's connection is still open")
	}
	if _, err := busConn(t, c, secret, spec.EnrolInbox(tok.ID), nil); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("a used token's secret connects: %v, want an authorization violation", err)
	}
}

// TestOperatorIsAnsweredOnlyUnderItsInbox: an API call whose reply subject
// is not under _OPERATOR is dropped before anything is done or audited.
func TestOperatorIsAnsweredOnlyUnderItsInbox(t *testing.T) {
	t.Parallel()
	c, db := newController(t, &clock{now: time.Now()})
	nc := operatorConn(t, c)
	own := spec.OperatorInbox
	joinWithKey(t, c, "beta")
	attempts := same(foreign(own), mustJSON(t, spec.NodeRemoveRequest{Name: "beta"}))
	// The calls that would remove beta are dropped; the one with its own
	// inbox is answered and audited.
	reply := tryReflect(t, c, db, nc, own, spec.APISubject(spec.NodeRemove.Name), attempts, mustJSON(t, spec.NodeRemoveRequest{Name: "nosuch"}), 1)
	if !strings.Contains(reply.Error, `no node called "nosuch"`) {
		t.Errorf("the call with its own inbox: %+v, want the refusal naming nosuch", reply)
	}
	if nodes, _ := db.Nodes(context.Background()); len(nodes) != 2 {
		t.Errorf("%d nodes: a dropped call removed a node", len(nodes))
	}
}

// TestRevokedTokenLeavesTheBusAtOnce: revoking a token closes the
// connections that hold its secret, and the secret is refused at connect
// when revoke returns.
func TestRevokedTokenLeavesTheBusAtOnce(t *testing.T) {
	t.Parallel()
	c, _ := newController(t, &clock{now: time.Now()})
	ctx := context.Background()
	res, err := c.enrolment.createToken(ctx, spec.TokenCreateRequest{Node: "gamma"})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := spec.ParseToken(res.Token)
	secret, _ := nkeys.FromSeed([]byte(tok.Secret))
	nc, err := busConn(t, c, secret, spec.EnrolInbox(tok.ID), nil)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if _, err := c.enrolment.revokeToken(ctx, spec.TokenRevokeRequest{ID: tok.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := busConn(t, c, secret, spec.EnrolInbox(tok.ID), nil); !errors.Is(err, nats.ErrAuthorization) {
		t.Errorf("a revoked token's secret connects: %v, want an authorization violation", err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Error("the revoked token's open connection survived its revocation")
	}
}

// TestServingUserPublishesOnlyToInboxes: the connection that serves
// requests holds a bus user that may publish only under inboxes, so a bug
// in the reply rule is still denied by the bus; the connection with full
// power serves nothing.
func TestServingUserPublishesOnlyToInboxes(t *testing.T) {
	t.Parallel()
	c, _ := newController(t, &clock{now: time.Now()})
	errs := make(chan error, 16)
	nc, err := busConn(t, c, c.cfg.Keys.Serve, "", errs)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{spec.NodeInbox("alpha") + ".x", spec.EnrolInbox("t1") + ".x", spec.OperatorInbox + ".x"} {
		nc.Publish(s, []byte(`{}`))
	}
	nc.Flush()
	select {
	case err := <-errs:
		t.Fatalf("publishing under an inbox raised %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	for _, s := range []string{
		"mesh.decl.x",
		spec.DeclarationDelivery("alpha"),
		spec.APISubject(spec.NodeRemove.Name),
		spec.PreviewSubject("alpha"),
		spec.NodeSubject("alpha", spec.KindReport),
		"$JS.API.INFO",
	} {
		nc.Publish(s, []byte(`{}`))
		nc.Flush()
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), `"`+s+`"`) {
				t.Errorf("publish to %s: %v, want a permissions violation naming it", s, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("the serving credential published to %s unhindered", s)
		}
	}

	// Every subscription that serves is held by the serving user, and the
	// full user serves nothing.
	full, _ := c.cfg.Keys.Full.PublicKey()
	serve, _ := c.cfg.Keys.Serve.PublicKey()
	cz, err := c.deps.Bus.NATS().Connz(&server.ConnzOptions{Subscriptions: true, Username: true})
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, ci := range cz.Conns {
		for _, sub := range ci.Subs {
			if !strings.HasPrefix(sub, "mesh.") {
				continue
			}
			switch ci.AuthorizedUser {
			case serve:
				served[sub] = true
			case full:
				t.Errorf("the full-power connection serves %s", sub)
			}
		}
	}
	for _, sub := range spec.ControllerServePermissions().Subscribe {
		if !served[sub] {
			t.Errorf("%s is not served by the serving user (served: %v)", sub, served)
		}
	}
}
