package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

func TestJoin(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	tok := m.token(t, "beta")
	hostDir, h := join(t, tok)

	poll.Until(t, 20*time.Second, "both nodes listed and heard", func() error {
		nodes := nodeList(t, m.dir)
		if len(nodes) != 2 {
			return fmt.Errorf("%d nodes", len(nodes))
		}
		for _, n := range nodes {
			if n.LastHeard == nil {
				return errors.New(n.Name + " not heard")
			}
		}
		if nodes[1].Name == "beta" && nodes[1].Address == "127.0.0.2" && nodes[1].Facts != nil {
			return nil
		}
		return fmt.Errorf("%+v", nodes[1])
	})

	// The host keeps its seed (0600) and the pin; the seed never left it.
	info, err := os.Stat(filepath.Join(hostDir, "host", "node.creds"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("node.creds: %v, mode %v", err, info)
	}
	var st map[string]any
	body, _ := os.ReadFile(filepath.Join(hostDir, "host", "state.json"))
	json.Unmarshal(body, &st)
	parsed, _ := spec.ParseToken(tok)
	if st["ca_pin"] != parsed.Pin || st["sign_key"] == "" {
		t.Errorf("state.json does not keep the pin and signing key: %s", body)
	}
	if strings.Contains(m.d.out.String(), readSeed(t, hostDir)) {
		t.Error("the node's seed appears in the controller's output")
	}
	// And its sealing key's private half, in seal.key alone; the controller
	// holds the public half.
	checkSealKey(t, hostDir, nodeShow(t, m.dir, "beta").SealKey)
	// The controller's own node has one too, made at genesis.
	checkSealKey(t, m.dir, nodeShow(t, m.dir, "alpha").SealKey)

	// The token is spent: not open any more.
	out, _, _ := runMesh(t, "token", "list", "--dir", m.dir, "--json")
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("open tokens after a join: %s", out)
	}

	// The controller stops and starts again on its port: the joined host is
	// heard again with no action.
	m.d.stop(t)
	stopped := time.Now()
	d2 := start(t, "controller", "--dir", m.dir)
	waitReady(t, d2, m.dir)
	poll.Until(t, 30*time.Second, "beta heard again after the controller restarted", func() error {
		return heardAfter(t, m.dir, "beta", stopped)
	})
	h.stop(t)
}

func readSeed(t *testing.T, hostDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(hostDir, "host", "node.creds"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// reencode changes a token's fields, as a forger would.
func reencode(t *testing.T, tok string, change func(*spec.Token)) string {
	t.Helper()
	parsed, err := spec.ParseToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	change(&parsed)
	return parsed.Encode()
}

func TestBadTokensAreRefusedAndLeaveNothing(t *testing.T) {
	t.Parallel()
	m := newMesh(t)

	joined := func(tok string) {
		dir, h := join(t, tok)
		poll.Until(t, 20*time.Second, "joined", func() error {
			_, err := os.Stat(filepath.Join(dir, "host", "state.json"))
			return err
		})
		h.stop(t)
	}
	used := m.token(t, "used")
	joined(used)

	revoked := m.token(t, "revoked")
	id := mustParse(t, revoked).ID
	if _, errOut, code := runMesh(t, "token", "revoke", "--dir", m.dir, id); code != 0 {
		t.Fatalf("revoke: %s", errOut)
	}
	twiceA := m.token(t, "twice")
	twiceB := m.token(t, "twice")
	joined(twiceA)

	otherSeed, _ := nkeys.CreateUser()
	otherSecret, _ := otherSeed.Seed()
	fresh := m.token(t, "fresh")
	otherPin := sha256.Sum256([]byte("another root"))

	cases := []struct {
		name, token, want string
		noAttempt         bool // the controller must not even hear of it
	}{
		{"malformed", "not-a-token", "malformed token", true},
		{"malformed base64", "mesh1.!!!", "malformed token", true},
		{"expired", reencode(t, fresh, func(tk *spec.Token) { tk.Expires = time.Now().Add(-time.Minute) }), "expired at", true},
		{"forged secret", reencode(t, fresh, func(tk *spec.Token) { tk.Secret = string(otherSecret) }), "the bus refused token", true},
		{"pinned to another root", reencode(t, fresh, func(tk *spec.Token) { tk.Pin = "sha256:" + hex.EncodeToString(otherPin[:]) }), "is not the mesh this token was made for", true},
		{"used", used, "the bus refused token " + mustParse(t, used).ID + ": it was already used, or revoked, or it expired (or it is forged): create a new one with mesh token create used", true},
		{"revoked", revoked, "create a new one with mesh token create revoked", true},
		{"node exists", twiceB, `a node called "twice" is already in the mesh`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := m.nodeNames(t)
			attempts := m.metric(t, "mesh_enrol_requests_total")
			parent := t.TempDir()
			dir := filepath.Join(parent, "host")
			// On a port of the test's: a token good enough to reach the
			// controller has the host bind its resolver first, and the
			// default port may be another run's.
			_, errOut, code := runMesh(t, "host", "--dir", dir, "--join", c.token, "--address", "127.0.0.9", "--dns", port(t), "--dns-upstream", deadUpstream)
			if code == 0 {
				t.Fatal("the join succeeded")
			}
			if !strings.Contains(errOut, c.want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("stderr %q: want one line containing %q", errOut, c.want)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("a refused join left %d entries in --dir's parent", len(entries))
			}
			if after := m.nodeNames(t); after != before {
				t.Errorf("nodes changed from %s to %s", before, after)
			}
			if got := m.metric(t, "mesh_enrol_requests_total"); c.noAttempt && got != attempts {
				t.Errorf("the controller saw %d enrolment attempt(s)", got-attempts)
			}
		})
	}
}

func mustParse(t *testing.T, tok string) spec.Token {
	t.Helper()
	p, err := spec.ParseToken(tok)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// nodeConn connects to the bus as the node whose host directory is hostDir,
// collecting the bus's asynchronous errors.
func nodeConn(t *testing.T, m *testMesh, hostDir string) (*nats.Conn, chan error, error) {
	t.Helper()
	kp, err := nkeys.FromSeed([]byte(readSeed(t, hostDir)))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Node   string `json:"node"`
		CARoot string `json:"ca_root"`
	}
	body, _ := os.ReadFile(filepath.Join(hostDir, "host", "state.json"))
	json.Unmarshal(body, &st)
	root, err := ca.ParseCert([]byte(st.CARoot))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	errs := make(chan error, 16)
	nc, err := nats.Connect("nats://"+m.addrs.Bus,
		nats.Nkey(pub, kp.Sign),
		nats.Secure(ca.ClientTLS(root, spec.BusTLSName)),
		nats.TLSHandshakeFirst(),
		nats.CustomInboxPrefix(spec.NodeInbox(st.Node)),
		nats.NoReconnect(),
		nats.Timeout(10*time.Second), // not nats.go's 2 s: a loaded machine
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }),
	)
	if err == nil {
		t.Cleanup(nc.Close)
	}
	return nc, errs, err
}

func wantViolation(t *testing.T, errs chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(what)) {
			t.Errorf("want a permission violation for %s, got %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s: the bus raised no permission violation", what)
	}
}

// TestNodeTouchesOnlyItsOwnSubjects holds invariant 10 with alpha's own
// credential.
func TestNodeTouchesOnlyItsOwnSubjects(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	betaDir, h := join(t, m.token(t, "beta"))
	poll.Until(t, 20*time.Second, "beta joined", func() error {
		if m.nodeNames(t) == "alpha,beta" {
			return nil
		}
		return errors.New(m.nodeNames(t))
	})
	h.stop(t)

	nc, errs, err := nodeConn(t, m, m.dir)
	if err != nil {
		t.Fatal(err)
	}
	// What alpha may do: publish its own heartbeat, subscribe its inbox,
	// its own delivery subjects and the roster every host reads.
	for _, own := range []string{spec.DeclarationDelivery("alpha"), spec.RosterDelivery} {
		if _, err := nc.SubscribeSync(own); err != nil {
			t.Fatal(err)
		}
	}
	nc.Publish(spec.NodeSubject("alpha", spec.KindHeartbeat), []byte(`{}`))
	nc.Flush()
	select {
	case err := <-errs:
		t.Fatalf("alpha's own subjects raised %v", err)
	case <-time.After(300 * time.Millisecond):
	}

	subs := []struct{ subject, what string }{
		{spec.DeclarationDelivery("beta"), "subscription to \"" + spec.DeclarationDelivery("beta")},
		{spec.Republished(">"), "subscription to \"" + spec.Republished(">")},
		{"_INBOX.>", "subscription to \"_INBOX.>"},
		{spec.NodeInbox("beta") + ".>", "subscription to \"_INBOX.beta.>"},
		{"mesh.>", "subscription to \"mesh.>"},
	}
	for _, s := range subs {
		if _, err := nc.SubscribeSync(s.subject); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
		wantViolation(t, errs, s.what)
	}
	pubs := []string{
		spec.NodeSubject("beta", spec.KindHeartbeat),
		spec.APISubject(spec.NodeList.Name),
		"$JS.API.CONSUMER.CREATE." + spec.DeclarationStream + ".x",
		"$JS.API.INFO",
		"$JS.API.STREAM.LIST",
		"$SYS.REQ.SERVER.PING",
		spec.EnrolSubject,
	}
	for _, p := range pubs {
		nc.Publish(p, []byte(`{}`))
		nc.Flush()
		wantViolation(t, errs, "publish to \""+p)
	}
	// The API answers no one but the operator: a request gets no reply.
	if _, err := nc.Request(spec.APISubject(spec.NodeList.Name), []byte(`{}`), time.Second); err == nil {
		t.Error("alpha's credential called the operator API")
	}

	// Removing beta: its credential stops working; its next connection is refused.
	bc, _, err := nodeConn(t, m, betaDir)
	if err != nil {
		t.Fatalf("beta cannot connect before removal: %v", err)
	}
	closed := make(chan struct{})
	bc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if _, errOut, code := runMesh(t, "node", "remove", "--dir", m.dir, "beta"); code != 0 {
		t.Fatalf("node remove: %s", errOut)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Error("beta's open connection survived its removal")
	}
	if _, _, err := nodeConn(t, m, betaDir); err == nil {
		t.Error("a removed node connected again")
	}
	if got := m.nodeNames(t); got != "alpha" {
		t.Errorf("nodes after removal: %s", got)
	}
}

// TestTokenCredentialIsInForceWhenPrinted holds invariant 9: the moment
// token create returns, the token's enrolment user can connect.
func TestTokenCredentialIsInForceWhenPrinted(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	for i := range 5 {
		tok := mustParse(t, m.token(t, fmt.Sprintf("n%d", i)))
		kp, err := nkeys.FromSeed([]byte(tok.Secret))
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		nc, err := nats.Connect(strings.Join(tok.Bus, ","), nats.Nkey(pub, kp.Sign),
			nats.Secure(ca.PinnedTLS(tok.Pin, spec.BusTLSName, nil)), nats.TLSHandshakeFirst(), nats.NoReconnect(),
			nats.Timeout(10*time.Second)) // not nats.go's 2 s: a loaded machine
		if err != nil {
			t.Fatalf("token %d's credential refused right after it was printed: %v", i, err)
		}
		nc.Close()
	}
}

// TestForeignProtocolIsShownAsSuch: a host speaking a protocol this
// controller does not is shown as such, not as broken or unheard.
func TestForeignProtocolIsShownAsSuch(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	nc, _, err := nodeConn(t, m, m.dir)
	if err != nil {
		t.Fatal(err)
	}
	hb, _ := json.Marshal(spec.Heartbeat{Node: "alpha", Time: time.Now(), HostVersion: "abc", Protocol: spec.Protocol + 98})
	if err := nc.Publish(spec.NodeSubject("alpha", spec.KindHeartbeat), hb); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	poll.Until(t, 10*time.Second, "the foreign protocol shown", func() error {
		out, _, _ := runMesh(t, "node", "show", "--dir", m.dir, "alpha")
		if strings.Contains(out, fmt.Sprintf("%d (refused: this controller speaks %d; upgrade the host with `mesh release roll`)", spec.Protocol+98, spec.Protocol)) &&
			strings.Contains(out, "ago (") {
			return nil
		}
		return errors.New(out)
	})
	n := nodeList(t, m.dir)[0]
	if n.ProtocolKnown || n.Protocol != spec.Protocol+98 || n.LastHeard == nil {
		t.Errorf("JSON: protocol %d known %v heard %v", n.Protocol, n.ProtocolKnown, n.LastHeard)
	}
}
