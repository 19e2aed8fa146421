package host

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/internal/retry"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// JoinConfig is what joining a mesh needs.
type JoinConfig struct {
	Dir     string // the host's directory, D/host; must hold no state
	Token   spec.Token
	Address string // where other nodes reach this one
	Now     time.Time
	// Controller, with a controller's token, joins a controller with
	// the node: Answered then takes the answer, and the node's sealing
	// key its keys are sealed to, before the host's state is written.
	Controller *spec.ControllerJoin
	Answered   func(res spec.EnrolResult, key *seal.NodeKey) error
	// Waiting, when given, is told why the enrolment is sent again: the
	// controller could not answer for now.
	Waiting func(why error)
}

// joinWait bounds how long a join sends its enrolment again while the
// controller cannot answer for now (none subscribed, one restarting as
// its cluster grows); answerWait is how long one sending waits for its
// answer, longer than the controller's own asking again of the bus.
const (
	joinWait   = 90 * time.Second
	answerWait = 25 * time.Second
)

// errUnanswered is an enrolment sent that nothing answered in time; it
// may be sent again.
var errUnanswered = errors.New("no answer from the controller")

// errTokenRefused is a token whose secret the bus refused at connect.
var errTokenRefused = errors.New("the bus refused token")

// errCutShort is an enrolment whose connection the bus closed before
// the controller answered: the token was spent or revoked meanwhile, or
// the bus restarted. A new connection tells which.
var errCutShort = errors.New("the bus closed the connection before the controller answered")

// Join enrols this machine with the mesh the token names. It checks the
// bus's certificate chain against the token's pin before it sends anything
// (TLS is the first thing on the wire), generates the node's key and its
// sealing key and its WireGuard key and sends only their public halves,
// and writes the host's state, credential and sealing key
// (seal.NodeKeyFile) only once the controller has answered yes (the
// WireGuard key, seal.WGKeyFile, is written before it asks and removed
// on a failure). On any failure it leaves nothing behind.
func Join(ctx context.Context, cfg JoinConfig) error {
	t := cfg.Token
	if err := CheckUnjoined(cfg.Dir); err != nil {
		return err
	}
	if !cfg.Now.Before(t.Expires) {
		return fmt.Errorf("token %s expired at %s: ask the operator for a new one (mesh token create %s)", t.ID, t.Expires.UTC().Format(time.RFC3339), t.Node)
	}
	enrolKey, err := nkeys.FromSeed([]byte(t.Secret))
	if err != nil {
		return fmt.Errorf("malformed token: its secret: %w", err)
	}
	bus := &tokenBus{token: t, key: enrolKey}
	dial := func() (*nats.Conn, error) { return bus.dial(ctx) }
	nc, err := dial()
	if err != nil {
		return err
	}
	defer nc.Close()
	keys, err := newJoinKeys()
	if err != nil {
		return err
	}
	req, err := keys.request(cfg, enrolKey)
	if err != nil {
		return err
	}
	res, err := enrol(ctx, cfg, nc, dial, req)
	if err != nil {
		return fmt.Errorf("join as %q: %w", t.Node, err)
	}
	if res.Node != t.Node || res.Mesh != t.Mesh {
		return fmt.Errorf("join as %q: the controller answered for node %q of mesh %q", t.Node, res.Node, res.Mesh)
	}
	return keepJoin(cfg, res, keys, bus.root)
}

// tokenBus reaches the bus a token names, as the token's enrolment user.
type tokenBus struct {
	token spec.Token
	key   nkeys.KeyPair // the token's enrolment key
	// root is the mesh's root the last connection's certificate chain
	// led to, checked against the token's pin.
	root *x509.Certificate
}

// connect connects once, over TLS checked against the token's pin before
// anything is sent (TLS is the first thing on the wire).
func (b *tokenBus) connect() (*nats.Conn, error) {
	t := b.token
	pub, _ := b.key.PublicKey()
	return nats.Connect(strings.Join(t.Bus, ","),
		nats.Name("enrol "+t.Node),
		nats.Nkey(pub, b.key.Sign),
		nats.Secure(ca.PinnedTLS(t.Pin, spec.BusTLSName, func(c *x509.Certificate) { b.root = c })),
		nats.TLSHandshakeFirst(),
		nats.CustomInboxPrefix(spec.EnrolInbox(t.ID)),
		nats.NoReconnect(),
		nats.Timeout(10*time.Second),
	)
}

// dial connects. A connection that fails on the way (closed by the bus, a
// handshake late on a loaded machine) is not an answer, so it tries
// again, briefly. A refused credential or a root that does not match the
// pin is an answer.
func (b *tokenBus) dial(ctx context.Context) (*nats.Conn, error) {
	var nc *nats.Conn
	err := retry.Do(ctx, 4, retry.Linear(100*time.Millisecond), func() error {
		var err error
		nc, err = b.connect()
		if err != nil && (errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrNoServers) || strings.Contains(err.Error(), "pin")) {
			return retry.Final(err)
		}
		return err
	})
	if err != nil {
		return nil, joinConnectError(b.token, err)
	}
	return nc, nil
}

// joinKeys are the keys a join makes: the node's credential, its sealing
// key and its WireGuard key. Only their public halves are sent.
type joinKeys struct {
	node nkeys.KeyPair
	seal *seal.NodeKey
	wg   *seal.WGKey
}

// newJoinKeys generates a join's keys.
func newJoinKeys() (joinKeys, error) {
	node, err := nkeys.CreateUser()
	if err != nil {
		return joinKeys{}, fmt.Errorf("generate the node's key: %w", err)
	}
	sk, err := seal.GenerateNodeKey()
	if err != nil {
		return joinKeys{}, err
	}
	wg, err := seal.GenerateWGKey()
	if err != nil {
		return joinKeys{}, err
	}
	return joinKeys{node: node, seal: sk, wg: wg}, nil
}

// request is the enrolment request of a join with cfg, the keys' public
// halves and the machine's facts, proved by the token's enrolment key.
func (k joinKeys) request(cfg JoinConfig, enrolKey nkeys.KeyPair) (spec.EnrolRequest, error) {
	t := cfg.Token
	nodePub, _ := k.node.PublicKey()
	facts := GatherFacts()
	facts.Node, facts.Time = t.Node, cfg.Now.UTC()
	req := spec.EnrolRequest{Protocol: spec.Protocol, TokenID: t.ID, Node: t.Node, NKey: nodePub,
		SealKey: k.seal.Public().String(), WGKey: k.wg.Public(), Address: cfg.Address, Facts: facts, Controller: cfg.Controller}
	var err error
	if req.Proof, err = enrolKey.Sign(req.ProofBytes()); err != nil {
		return spec.EnrolRequest{}, fmt.Errorf("sign the enrolment request: %w", err)
	}
	return req, nil
}

// keepJoin hands the controller's answer res on (cfg.Answered), then
// writes the host's sealing key, WireGuard key, state and credential,
// with root the mesh's root the bus led to. A failure leaves none of the
// keys behind.
func keepJoin(cfg JoinConfig, res spec.EnrolResult, keys joinKeys, root *x509.Certificate) error {
	t := cfg.Token
	recorded := func(err error) error {
		return fmt.Errorf("join as %q: the controller recorded it, but %w; remove the node (mesh node remove %s) and join again", t.Node, err, t.Node)
	}
	if cfg.Answered != nil {
		if err := cfg.Answered(res, keys.seal); err != nil {
			return recorded(err)
		}
	}
	seed, _ := keys.node.Seed()
	bus := res.Bus
	if len(bus) == 0 {
		bus = t.Bus
	}
	if err := KeepSealKey(cfg.Dir, keys.seal); err != nil {
		return recorded(err)
	}
	if err := keepWGKey(cfg.Dir, keys.wg); err != nil {
		os.Remove(filepath.Join(cfg.Dir, seal.NodeKeyFile))
		return recorded(err)
	}
	err := Init(cfg.Dir, State{
		Mesh: res.Mesh, Node: res.Node, Address: cfg.Address, Bus: bus,
		CAPin: t.Pin, CARoot: string(ca.RootPEM(root)), SignKey: res.SignKey,
	}, seed)
	if err != nil {
		os.Remove(filepath.Join(cfg.Dir, seal.NodeKeyFile))
		os.Remove(filepath.Join(cfg.Dir, seal.WGKeyFile))
		return err
	}
	return nil
}

// keepWGKey writes the private half of the WireGuard key made for a join
// to dir (seal.WGKeyFile, 0600) once the controller took its public half.
// A key left without its state (a join cut short) is no key of this
// host's, and is replaced.
func keepWGKey(dir string, k *seal.WGKey) error {
	path := filepath.Join(dir, seal.WGKeyFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove a wireguard key left without its state: %w", err)
	}
	return k.WriteFile(path)
}

// RemovedFile, in the host's directory, says that its node was removed
// from the mesh: the bus refused its credential for good. It holds the
// time that was seen, RFC 3339. A later join into the directory is told
// so.
const RemovedFile = "removed"

// JoinedError is a join into a host's directory that holds the state of a
// node already: one that runs without --join, or one that was removed from
// the mesh (Removed), whose directory is removed or replaced to join again.
type JoinedError struct {
	Dir        string // the host's directory, D/host
	Mesh, Node string // what its state says, when it could be read
	Removed    bool
}

func (e *JoinedError) Error() string {
	node := "a node"
	if e.Node != "" {
		node = fmt.Sprintf("node %q of mesh %q", e.Node, e.Mesh)
	}
	if e.Removed {
		return fmt.Sprintf("%s holds %s, removed from the mesh: remove %s (or give --dir a new directory) and join again", e.Dir, node, e.Dir)
	}
	return fmt.Sprintf("%s holds %s that joined already: run it without --join; to join it again, remove %s (or give --dir a new directory)", e.Dir, node, e.Dir)
}

// CheckUnjoined returns a *JoinedError when dir, a host's directory, holds
// a node's state.
func CheckUnjoined(dir string) error {
	body, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	e := &JoinedError{Dir: dir}
	var st struct{ Mesh, Node string }
	if err == nil && json.Unmarshal(body, &st) == nil {
		e.Mesh, e.Node = st.Mesh, st.Node
	}
	if _, err := os.Stat(filepath.Join(dir, RemovedFile)); err == nil {
		e.Removed = true
	}
	return e
}

// MarkRemoved writes RemovedFile in dir, the host's directory of a node
// the bus refuses for good, and deletes the node's WireGuard private key:
// no peer holds its public half any more, and a join makes a new one.
func MarkRemoved(dir string, at time.Time) error {
	if err := os.WriteFile(filepath.Join(dir, RemovedFile), []byte(at.UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		return fmt.Errorf("mark the node removed: %w", err)
	}
	if err := os.Remove(filepath.Join(dir, seal.WGKeyFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete the removed node's wireguard key: %w", err)
	}
	return nil
}

// KeepSealKey writes the private half of the sealing key made for a join
// (or a genesis) to dir (0600), apart from state.json: the state is rewritten at
// every delivery, and the key is written once. A key left without its
// state (a join cut short) is no key of this host's, and is replaced.
func KeepSealKey(dir string, k *seal.NodeKey) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create host directory: %w", err)
	}
	path := filepath.Join(dir, seal.NodeKeyFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove a sealing key left without its state: %w", err)
	}
	return k.WriteFile(path)
}

// joinConnectError says which of the token's promises the bus broke.
func joinConnectError(t spec.Token, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no root with pin"), strings.Contains(msg, "pinned root"):
		return fmt.Errorf("the bus at %s is not the mesh this token was made for: %w; nothing was sent", strings.Join(t.Bus, ","), err)
	case errors.Is(err, nats.ErrAuthorization), strings.Contains(strings.ToLower(msg), "authorization"):
		return fmt.Errorf("%w %s: it was already used, or revoked, or it expired (or it is forged): create a new one with mesh token create %s", errTokenRefused, t.ID, t.Node)
	default:
		return fmt.Errorf("reach the bus at %s: %w", strings.Join(t.Bus, ","), err)
	}
}

// enrol sends req on nc, and again on a new connection dial makes while
// the controller cannot answer for now, until joinWait: the same request,
// so once a controller recorded one, the token is spent and the next
// connection is refused for it. It closes every connection.
func enrol(ctx context.Context, cfg JoinConfig, nc *nats.Conn, dial func() (*nats.Conn, error), req spec.EnrolRequest) (spec.EnrolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, joinWait)
	defer cancel()
	sent := false
	for {
		if nc == nil {
			var err error
			if nc, err = dial(); err != nil {
				if sent && errors.Is(err, errTokenRefused) {
					return spec.EnrolResult{}, fmt.Errorf("%w; an enrolment of this join was sent and its answer lost, so the controller may have recorded it: mesh node show %s tells; to join again, mesh node remove %s and create a new token", err, cfg.Token.Node, cfg.Token.Node)
				}
				return spec.EnrolResult{}, err
			}
		}
		sent = true
		var res spec.EnrolResult
		err := enrolAsk(ctx, nc, cfg.Token, req, &res)
		nc.Close()
		nc = nil
		if err == nil {
			return res, nil
		}
		if !errors.Is(err, errNoController) && !errors.Is(err, errUnanswered) && !errors.Is(err, errCutShort) {
			return spec.EnrolResult{}, err
		}
		if cfg.Waiting != nil {
			cfg.Waiting(err)
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return spec.EnrolResult{}, fmt.Errorf("%w; asked for %s", err, joinWait)
		case <-t.C:
		}
	}
}

// enrolAsk sends the enrolment request and decodes the controller's answer
// into res. The answer is read into a channel the connection fills as it
// reads: once it has answered, the controller withdraws the used token's
// user and the bus closes this connection, so the answer must not wait in a
// handler's queue that the close discards.
func enrolAsk(ctx context.Context, nc *nats.Conn, t spec.Token, req spec.EnrolRequest, res *spec.EnrolResult) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode the request: %w", err)
	}
	inbox := nc.NewInbox()
	answers := make(chan *nats.Msg, 1)
	sub, err := nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return fmt.Errorf("listen for the controller's answer: %w", err)
	}
	defer sub.Unsubscribe()
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.PublishRequest(spec.EnrolSubject, inbox, body); err != nil {
		return fmt.Errorf("send the enrolment request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, answerWait)
	defer cancel()
	var msg *nats.Msg
	select {
	case msg = <-answers:
	case <-closed:
		select {
		case msg = <-answers:
		default:
			return fmt.Errorf("%w: token %s was used or revoked meanwhile, or the bus restarted", errCutShort, t.ID)
		}
	case <-ctx.Done():
		return fmt.Errorf("%w in %s: %w", errUnanswered, answerWait, ctx.Err())
	}
	if msg.Header.Get("Status") == "503" {
		return errNoController
	}
	return spec.DecodeReply(msg.Data, res)
}

// request sends v to subject and decodes the controller's reply into res.
func request(ctx context.Context, nc *nats.Conn, subject string, v, res any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, subject, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return errNoController
	}
	if err != nil {
		return err
	}
	return spec.DecodeReply(msg.Data, res)
}
