package mesh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/ca"
	"github.com/mesh-fleet/mesh/seal"
	"github.com/mesh-fleet/mesh/spec"
	"github.com/mesh-fleet/mesh/store"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Token lifetimes an operator may ask for.
const (
	DefaultTokenTTL = time.Hour
	MinTokenTTL     = time.Minute
	MaxTokenTTL     = 7 * 24 * time.Hour
)

// enrolment admits nodes and withdraws them: tokens, the joining hosts'
// answers, node removal, and the bus users they put in force.
type enrolment struct {
	base
	keys     Keys
	busURLs  []string
	node     string // the controller's own node, which is never removed
	signKey  ed25519.PrivateKey
	maxNodes int
	// joins admits controllers; nil without a cluster.
	joins   ControllerJoins
	bus     *broker.Server
	ca      *ca.Authority
	metrics *metrics
	locks   *nodeLocks
	beats   *beats
	// purge drops what the declaration stream holds for a node.
	purge func(ctx context.Context, node string) error
	// sendNames composes the mesh's roster and sends it when it changed:
	// what it sent (nil: nothing, it held the same names).
	sendNames func(ctx context.Context) (*spec.PushRoster, error)
	// membershipChanged asks for the roster to be sent soon: the
	// overlay's membership changed.
	membershipChanged func()

	mu        sync.Mutex
	users     map[string]broker.User // as last given to the bus, by nkey
	answering map[string]store.Token // used tokens whose host is still hearing its answer
}

// syncUsers composes every bus user from the store and gives them to the
// bus if they changed. It returns once they are in force: a user withdrawn
// has had its connections closed. It costs what every node costs: at
// start-up and in the sweep (a token expired) it is the truth the changes
// one user at a time (addUser, withdrawUser) are checked against.
func (en *enrolment) syncUsers(ctx context.Context) error {
	en.mu.Lock()
	defer en.mu.Unlock()
	users, err := Users(ctx, en.db, en.keys, en.now())
	if err != nil {
		return fmt.Errorf("compose the bus's users: %w", err)
	}
	next := byKey(users)
	en.keepAnswering(next)
	if reflect.DeepEqual(next, en.users) {
		return nil
	}
	if err := en.bus.SetUsers(slices.Collect(maps.Values(next))); err != nil {
		return err
	}
	en.users = next
	return nil
}

// addUser puts u in force on the bus beside the users in force, at the
// cost of one user: the one a token or a join adds. It returns once u is
// in force.
func (en *enrolment) addUser(u broker.User) error {
	en.mu.Lock()
	defer en.mu.Unlock()
	if old, ok := en.users[u.NKey]; ok && reflect.DeepEqual(old, u) {
		return nil
	}
	if err := en.bus.AddUser(u); err != nil {
		return err
	}
	if en.users == nil {
		en.users = map[string]broker.User{}
	}
	en.users[u.NKey] = u
	return nil
}

// withdrawUser takes the user nkey off the bus, at the cost of one user,
// and returns once its connections are closed. Called with en.mu held.
func (en *enrolment) withdrawUser(nkey string) {
	en.bus.WithdrawUser(nkey)
	delete(en.users, nkey)
}

// withdrawToken takes t's enrolment user off the bus, unless a host is
// being answered under it (releaseEnrolUser withdraws it then).
func (en *enrolment) withdrawToken(t store.Token) {
	en.mu.Lock()
	defer en.mu.Unlock()
	if _, held := en.answering[t.ID]; !held {
		en.withdrawUser(t.EnrolNKey)
	}
}

// withdrawNode takes node's user off the bus, its key read from the store.
func (en *enrolment) withdrawNode(ctx context.Context, node string) error {
	n, err := en.db.Node(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	en.mu.Lock()
	defer en.mu.Unlock()
	en.withdrawUser(n.NKey)
	return nil
}

// byKey is users by nkey.
func byKey(users []broker.User) map[string]broker.User {
	m := make(map[string]broker.User, len(users))
	for _, u := range users {
		m[u.NKey] = u
	}
	return m
}

func (en *enrolment) createToken(ctx context.Context, req spec.TokenCreateRequest) (spec.TokenCreateResult, error) {
	if err := spec.CheckName("node", req.Node); err != nil {
		return spec.TokenCreateResult{}, callerError(err.Error())
	}
	ttl := req.TTL
	if ttl == 0 {
		ttl = DefaultTokenTTL
	}
	if ttl < MinTokenTTL || ttl > MaxTokenTTL {
		return spec.TokenCreateResult{}, callerError(fmt.Sprintf("--ttl %s: a token lives from %s to %s", ttl, MinTokenTTL, MaxTokenTTL))
	}
	if err := en.nameTaken(ctx, req.Node); err != nil {
		return spec.TokenCreateResult{}, err
	}
	if err := en.roomFor(ctx, req.Node); err != nil {
		return spec.TokenCreateResult{}, err
	}
	if req.Controller && en.joins == nil {
		return spec.TokenCreateResult{}, refusedError("this controller runs without --cluster: run it with --cluster HOST:PORT, then create a controller's token")
	}
	m, err := en.db.Mesh(ctx)
	if err != nil {
		return spec.TokenCreateResult{}, err
	}
	enrol, err := nkeys.CreateUser()
	if err != nil {
		return spec.TokenCreateResult{}, fmt.Errorf("generate enrolment key: %w", err)
	}
	enrolPub, _ := enrol.PublicKey()
	enrolSeed, _ := enrol.Seed()
	now := en.now()
	id := "t" + randomHex(5)
	t := store.Token{ID: id, Node: req.Node, EnrolNKey: enrolPub, Created: now, Expires: now.Add(ttl).Truncate(time.Second), Controller: req.Controller}
	if err := en.db.AddToken(ctx, t); err != nil {
		return spec.TokenCreateResult{}, err
	}
	// The enrolment user is in force on the bus before the token is handed
	// out (invariant 9).
	if err := en.addUser(enrolUser(t)); err != nil {
		return spec.TokenCreateResult{}, fmt.Errorf("put token %s's enrolment user on the bus: %w", id, err)
	}
	tok := spec.Token{Mesh: m.Name, ID: id, Node: req.Node, Pin: en.ca.Pin(), Bus: en.busURLs,
		Secret: string(enrolSeed), Expires: t.Expires.UTC(), Controller: req.Controller}
	en.log.Info("token created", "token", id, "node", req.Node, "expires", t.Expires.UTC(), "controller", req.Controller)
	return spec.TokenCreateResult{ID: id, Token: tok.Encode(), Expires: t.Expires.UTC()}, nil
}

// roomFor refuses a token for node when the mesh already admits as many
// nodes as it may: every node it holds (joined or being removed) and every
// other name an unused, unrevoked, unexpired token could join as. The
// limit is the largest fleet the mesh is measured at. It counts the nodes
// and reads only the open tokens and their names' nodes, so a token costs
// the same whatever the fleet's size. A read that failed is an error.
func (en *enrolment) roomFor(ctx context.Context, node string) error {
	joined, err := en.db.NodeCount(ctx)
	if err != nil {
		return fmt.Errorf("count the nodes the mesh admits: %w", err)
	}
	tokens, err := en.db.OpenTokens(ctx)
	if err != nil {
		return fmt.Errorf("count the tokens that may still join: %w", err)
	}
	now := en.now()
	var names []string
	seen := map[string]bool{node: true}
	for _, t := range tokens {
		if tokenOpen(t, now) && !seen[t.Node] {
			seen[t.Node] = true
			names = append(names, t.Node)
		}
	}
	nodes, err := en.db.NodesNamed(ctx, names)
	if err != nil {
		return fmt.Errorf("count the tokens that may still join: %w", err)
	}
	pending := len(names) - len(nodes)
	if max, held := en.maxNodes, joined+pending; held >= max {
		return refusedError(fmt.Sprintf("the mesh admits at most %d nodes (the fleet it is measured at, and room on stream %s for a consumer each) and %d are held: %d joined and %d unused tokens; remove a node (mesh node remove) or revoke a token (mesh token revoke) first",
			max, spec.DeclarationStream, held, joined, pending))
	}
	return nil
}

func tokenInfo(t store.Token) spec.TokenInfo {
	info := spec.TokenInfo{ID: t.ID, Node: t.Node, Created: t.Created.UTC(), Expires: t.Expires.UTC(), Controller: t.Controller}
	if !t.Used.IsZero() {
		u := t.Used.UTC()
		info.Used = &u
	}
	if !t.Revoked.IsZero() {
		r := t.Revoked.UTC()
		info.Revoked = &r
	}
	return info
}

func (en *enrolment) listTokens(ctx context.Context, req spec.TokenListRequest) (spec.TokenListResult, error) {
	ts, err := en.db.Tokens(ctx)
	if err != nil {
		return spec.TokenListResult{}, err
	}
	res := spec.TokenListResult{Tokens: []spec.TokenInfo{}}
	now := en.now()
	for _, t := range ts {
		if tokenOpen(t, now) || req.All {
			res.Tokens = append(res.Tokens, tokenInfo(t))
		}
	}
	return res, nil
}

func (en *enrolment) revokeToken(ctx context.Context, req spec.TokenRevokeRequest) (spec.Empty, error) {
	t, err := en.db.Token(ctx, req.ID)
	if errors.Is(err, store.ErrNotFound) {
		return spec.Empty{}, notFoundError(fmt.Sprintf("no token %q: mesh token list shows the open ones", req.ID))
	}
	if err != nil {
		return spec.Empty{}, err
	}
	if !t.Used.IsZero() {
		return spec.Empty{}, refusedError(fmt.Sprintf("token %s was already used, by node %q: to undo that, mesh node remove %s", t.ID, t.Node, t.Node))
	}
	if err := en.db.RevokeToken(ctx, req.ID, en.now()); err != nil {
		return spec.Empty{}, err
	}
	// Its secret stops working now: the bus drops the enrolment user and
	// with it any connection that holds it.
	en.withdrawToken(t)
	en.log.Info("token revoked", "token", req.ID, "node", t.Node)
	return spec.Empty{}, nil
}

// removeNode removes a node in steps that can each be taken again, so that
// a removal that fails half-way is finished by running it again:
//
//  1. the store records that the removal began (the node keeps its row);
//  2. the bus drops the node's user, composed from the store, and with it
//     the node's connections;
//  3. the stream's declarations for the node are purged: no error when
//     already done;
//  4. the store forgets the node, its assignments, declarations and report.
//
// Until the last step mesh status shows the node as being removed, nothing
// is sent to it, it is in no roster, and its name cannot be given to a new
// token. Every step runs under
// the node's lock, so no declaration is sent to it between the purge and
// the end.
func (en *enrolment) removeNode(ctx context.Context, req spec.NodeRemoveRequest) (spec.NodeRemoveResult, error) {
	if err := spec.CheckName("node", req.Name); err != nil {
		return spec.NodeRemoveResult{}, callerError(err.Error())
	}
	if req.Name == en.node {
		return spec.NodeRemoveResult{}, refusedError(fmt.Sprintf("node %q is this controller's own machine: its host runs in the controller's process and cannot be removed from the mesh", req.Name))
	}
	lock := en.locks.of(req.Name)
	lock.Lock()
	defer lock.Unlock()
	if err := en.db.BeginRemoval(ctx, req.Name, en.now()); errors.Is(err, store.ErrNotFound) {
		return spec.NodeRemoveResult{}, notFoundError(fmt.Sprintf("no node called %q: mesh node list shows the nodes", req.Name))
	} else if err != nil {
		return spec.NodeRemoveResult{}, err
	}
	unfinished := func(err error) error {
		return fmt.Errorf("node %q is only partly removed: %w; run mesh node remove %s again to finish", req.Name, err, req.Name)
	}
	// The node's credential stops working now: the bus drops its user and
	// with it the node's connections.
	if err := en.withdrawNode(ctx, req.Name); err != nil {
		return spec.NodeRemoveResult{}, unfinished(fmt.Errorf("its credential is still on the bus: %w", err))
	}
	if err := jsCall(ctx, func(ctx context.Context) error { return en.purge(ctx, req.Name) }); err != nil {
		return spec.NodeRemoveResult{}, unfinished(err)
	}
	if err := en.db.RemoveNode(ctx, req.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
		return spec.NodeRemoveResult{}, unfinished(err)
	}
	en.beats.forget(req.Name)
	en.log.Info("node removed", "node", req.Name)
	// The node's names leave every host now, not at the next push. A
	// roster that cannot be composed is not sent (invariant 1): the
	// removal is done, and its answer says the names stay until a push.
	var res spec.NodeRemoveResult
	roster, err := en.sendNames(ctx)
	if err != nil {
		en.log.Error("roster not sent after a removal", "node", req.Name, "err", err)
		res.NamesKept = fmt.Sprintf("the roster was not sent (%v): every host keeps the names it has, %s's among them, until the next mesh push", err, req.Name)
	}
	res.Roster = roster
	return res, nil
}

// nameTaken says why name cannot be given to a new node, or nil if it can.
func (en *enrolment) nameTaken(ctx context.Context, name string) error {
	n, err := en.db.Node(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case !n.Removing.IsZero():
		return refusedError(fmt.Sprintf("node %q is only partly removed: run mesh node remove %s again to finish, then join it again", name, name))
	default:
		return refusedError(fmt.Sprintf("a node called %q is already in the mesh: choose another name, or mesh node remove %s first", name, name))
	}
}

// onEnrol answers a joining host: it checks the token the request is bound
// to, records the node and puts its credential in force before answering,
// then withdraws the token's enrolment user. A request whose reply subject
// is not under its own token's enrolment inbox is dropped, and nothing is
// done for it.
func (c *Controller) onEnrol(ctx context.Context, m *nats.Msg, who requester) {
	c.metrics.enrols.Add(1)
	if !c.allowReply(m, who) {
		return
	}
	c.enrolment.enrolAnswering(ctx, m.Data, func(res spec.EnrolResult, err error) {
		switch {
		case err == nil:
		case spec.KindOf(err) != spec.ReplyFailed:
			c.log.Warn("enrolment refused", "err", err)
		default:
			c.log.Error("enrolment failed", "err", err)
		}
		c.respond(m, who, spec.EncodeReply(res, err))
		// The answer is with the bus before the enrolment user, and its
		// connection, go: the bus writes what it holds for a connection
		// before closing it.
		if err := c.serving.Flush(); err != nil {
			c.log.Warn("enrolment answer not flushed", "err", err)
		}
	})
}

// enrol is enrolAnswering with no one to answer.
func (en *enrolment) enrol(ctx context.Context, data []byte) (spec.EnrolResult, error) {
	return en.enrolAnswering(ctx, data, nil)
}

// enrolAnswering enrols the node a request asks for and hands the outcome
// to answer (when given) while the token's enrolment user is still on the
// bus; then a token used, or found used or revoked, leaves the bus, and its
// connections are closed: its secret reaches the bus no more.
func (en *enrolment) enrolAnswering(ctx context.Context, data []byte, answer func(spec.EnrolResult, error)) (spec.EnrolResult, error) {
	var held *store.Token
	defer func() {
		if held != nil {
			en.releaseEnrolUser(ctx, *held)
		}
	}()
	var after func()
	res, err := en.enrolSteps(ctx, data, &held, &after)
	if answer != nil {
		answer(res, err)
	}
	if after != nil && err == nil {
		after()
	}
	return res, err
}

// enrolSteps checks the request and the token it proves, and records the
// node and its credential. Before the store spends the token
// it holds the token's enrolment user on the bus, and says so in held. A
// controller's join sets after, to run once it was answered.
func (en *enrolment) enrolSteps(ctx context.Context, data []byte, held **store.Token, after *func()) (spec.EnrolResult, error) {
	req, t, err := en.provenRequest(ctx, data)
	if err != nil {
		return spec.EnrolResult{}, err
	}
	now := en.now()
	sealKey, err := en.checkRequest(req, t, now)
	if err != nil {
		return spec.EnrolResult{}, err
	}
	// The name starts from nothing: no declaration the stream kept for an
	// earlier node of that name (one removed before removals purged) is
	// delivered to this one. Under the node's lock, so a removal of the name
	// cannot interleave.
	lock := en.locks.of(req.Node)
	lock.Lock()
	defer lock.Unlock()
	if err := en.nameTaken(ctx, req.Node); err != nil {
		return spec.EnrolResult{}, err
	}
	if err := jsCall(ctx, func(ctx context.Context) error { return en.purge(ctx, req.Node) }); err != nil {
		return spec.EnrolResult{}, err
	}
	// The token's user stays on the bus until the host heard its answer,
	// and goes as soon as it has, whatever the outcome.
	en.holdEnrolUser(t)
	*held = &t
	if err := en.record(ctx, req, t, sealKey, now); err != nil {
		return spec.EnrolResult{}, err
	}
	m, err := en.db.Mesh(ctx)
	if err != nil {
		return spec.EnrolResult{}, err
	}
	en.log.Info("node joined", "node", req.Node, "address", req.Address, "token", t.ID)
	// On the overlay, a node joined is a change of membership: its peers
	// learn its key within a roster message. A read that fails asks for
	// the roster too: the send reads again, and sends nothing if it fails.
	if o, err := en.db.Overlay(ctx); err != nil || o.On() {
		en.membershipChanged()
	}
	res := spec.EnrolResult{
		Mesh: m.Name, Node: req.Node, Bus: en.busURLs,
		SignKey: base64.StdEncoding.EncodeToString(en.signKey.Public().(ed25519.PublicKey)),
	}
	if err := en.joinController(ctx, req, sealKey, &res, after); err != nil {
		return spec.EnrolResult{}, err
	}
	return res, nil
}

// provenRequest decodes an enrolment request and reads the token it names,
// which must be this mesh's and whose secret must have signed it. A host
// of another protocol is refused for that, whatever else its request
// holds.
func (en *enrolment) provenRequest(ctx context.Context, data []byte) (spec.EnrolRequest, store.Token, error) {
	var req spec.EnrolRequest
	if err := spec.Decode(data, &req); err != nil {
		if p := spec.PeekProtocol(data); p != 0 && p != spec.Protocol {
			return req, store.Token{}, refusedError(spec.JoinRefusal(p))
		}
		return req, store.Token{}, callerError("malformed enrolment request: " + err.Error())
	}
	if req.Protocol != spec.Protocol {
		return req, store.Token{}, refusedError(spec.JoinRefusal(req.Protocol))
	}
	t, err := en.db.Token(ctx, req.TokenID)
	if errors.Is(err, store.ErrNotFound) {
		return req, t, refusedError(fmt.Sprintf("token %q is not one this mesh made: it is forged or from another mesh", req.TokenID))
	}
	if err != nil {
		return req, t, err
	}
	enrolKey, err := nkeys.FromPublicKey(t.EnrolNKey)
	if err != nil {
		return req, t, fmt.Errorf("token %s's enrolment key: %w", t.ID, err)
	}
	if err := enrolKey.Verify(req.ProofBytes(), req.Proof); err != nil {
		return req, t, refusedError(fmt.Sprintf("token %s: the request is not signed by its secret: the token is forged", t.ID))
	}
	return req, t, nil
}

// checkRequest says whether token t, at now, still joins the node req
// names, and whether req's keys are well formed; it returns the node's
// sealing key.
func (en *enrolment) checkRequest(req spec.EnrolRequest, t store.Token, now time.Time) (seal.NodePublic, error) {
	switch {
	case !t.Revoked.IsZero():
		return seal.NodePublic{}, refusedError(fmt.Sprintf("token %s was revoked at %s: ask for a new one (mesh token create %s)", t.ID, t.Revoked.UTC().Format(time.RFC3339), t.Node))
	case !t.Used.IsZero():
		return seal.NodePublic{}, refusedError(fmt.Sprintf("token %s was already used at %s: a token joins one host once", t.ID, t.Used.UTC().Format(time.RFC3339)))
	case !now.Before(t.Expires):
		return seal.NodePublic{}, refusedError(fmt.Sprintf("token %s expired at %s: ask for a new one (mesh token create %s)", t.ID, t.Expires.UTC().Format(time.RFC3339), t.Node))
	case req.Node != t.Node:
		return seal.NodePublic{}, callerError(fmt.Sprintf("token %s is for node %q, not %q", t.ID, t.Node, req.Node))
	}
	if err := en.checkControllerJoin(t.ID, t.Controller, req.Controller); err != nil {
		return seal.NodePublic{}, err
	}
	if _, err := nkeys.FromPublicKey(req.NKey); err != nil || req.NKey[0] != 'U' {
		return seal.NodePublic{}, callerError(fmt.Sprintf("enrolment of %q: %q is not a user public key", req.Node, req.NKey))
	}
	sealKey, err := seal.ParseNodePublic(req.SealKey)
	if err != nil {
		return seal.NodePublic{}, callerError(fmt.Sprintf("enrolment of %q: seal_key: %v", req.Node, err))
	}
	return sealKey, nil
}

// record spends token t on the node req asks for, records the node and the
// facts its host sent, and puts the node's credential on the bus (with
// the edges' bucket if an edge was assigned to it beforehand), so it is in
// force before the host hears it joined.
func (en *enrolment) record(ctx context.Context, req spec.EnrolRequest, t store.Token, sealKey seal.NodePublic, now time.Time) error {
	if req.WGKey == "" {
		return callerError(fmt.Sprintf("enrolment of %q: no wireguard key: every host of this version makes one at join", req.Node))
	}
	if err := spec.CheckWGKey(req.WGKey); err != nil {
		return callerError(fmt.Sprintf("enrolment of %q: wg_key: %v", req.Node, err))
	}
	if err := en.db.Enrol(ctx, t.ID, store.Node{Name: req.Node, Address: req.Address, NKey: req.NKey, SealKey: sealKey.String(), WGKey: req.WGKey, Joined: now}); err != nil {
		if errors.Is(err, store.ErrTokenSpent) {
			return refusedError(fmt.Sprintf("token %s was used or revoked a moment ago", t.ID))
		}
		return err
	}
	facts := req.Facts
	facts.Node = req.Node
	if err := facts.Check(); err != nil {
		en.log.Warn("facts sent at enrolment refused: no machine has them", "node", req.Node, "err", err)
	} else if err := en.db.RecordFacts(ctx, facts, now); err != nil {
		en.log.Warn("facts sent at enrolment not recorded", "node", req.Node, "err", err)
	}
	edges, err := edgeNodes(ctx, en.db)
	if err != nil {
		return fmt.Errorf("node %q recorded, but its credential is not on the bus: %w", req.Node, err)
	}
	if err := en.addUser(nodeUser(req.Node, req.NKey, edges[req.Node])); err != nil {
		return fmt.Errorf("node %q recorded, but its credential is not on the bus: %w", req.Node, err)
	}
	return nil
}

// holdEnrolUser keeps t's enrolment user on the bus while its host is
// being answered, even once the store says t is used.
func (en *enrolment) holdEnrolUser(t store.Token) {
	en.mu.Lock()
	defer en.mu.Unlock()
	if en.answering == nil {
		en.answering = map[string]store.Token{}
	}
	en.answering[t.ID] = t
}

// releaseEnrolUser ends holdEnrolUser: a token the store says is used (or
// revoked, or expired) leaves the bus now, and its connections are closed;
// one still open (its enrolment refused before the store spent it) stays.
// If the store cannot be read, the sweep withdraws it.
func (en *enrolment) releaseEnrolUser(ctx context.Context, t store.Token) {
	en.mu.Lock()
	defer en.mu.Unlock()
	delete(en.answering, t.ID)
	now, err := en.db.Token(ctx, t.ID)
	if err != nil {
		en.log.Error("a token's secret may still reach the bus; the next sweep withdraws it", "token", t.ID, "err", err)
		return
	}
	if !tokenOpen(now, en.now()) {
		en.withdrawUser(t.EnrolNKey)
	}
}

// keepAnswering adds to users the enrolment users held for an answer that
// Users left out. Called with en.mu held.
func (en *enrolment) keepAnswering(users map[string]broker.User) {
	for _, t := range en.answering {
		if _, ok := users[t.EnrolNKey]; !ok {
			users[t.EnrolNKey] = enrolUser(t)
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
