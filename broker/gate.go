package broker

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// gate is the bus's users as nats-server asks for them: its Check sees every
// client that connects, proves it holds the seed of a user's nkey (the
// server's nonce signed), and gives it that user's account and permissions.
// Replacing the users is a swap of a map, never a configuration reload, and
// the gate knows which connections each user holds so that a user withdrawn
// can have them closed.
type gate struct {
	// ns is the server the gate guards, set before it starts; it finds
	// which of a user's connections are still open.
	ns *server.Server

	mu    sync.Mutex
	users map[string]*admitted // by nkey
	// standing are users kept beside users, by nkey: swap leaves them in
	// force. A nkey in both is admitted as users says.
	standing map[string]*admitted
	acc      *server.Account
	// sys is the system account, a System user's.
	sys *server.Account
}

// admitted is one user in force: what a connection of it is given, and the
// connections it was admitted with (client IDs, which nats-server never
// gives twice; some may have closed since).
type admitted struct {
	u     User
	perms *server.User
	conns map[uint64]struct{}
}

// pruneAt is how many connections a user may have recorded before the gate
// forgets the ones that closed: a host reconnects now and then and keeps
// one connection, so the record stays small.
const pruneAt = 8

// start ties the gate to its server and the mesh account, before the server
// accepts a connection.
func (g *gate) start(ns *server.Server, acc, sys *server.Account) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ns, g.acc, g.sys = ns, acc, sys
	for _, a := range g.users {
		a.perms.Account = g.accountOf(a.u)
	}
	for _, a := range g.standing {
		a.perms.Account = g.accountOf(a.u)
	}
}

// table builds the users' map from users. Each user that was in force
// before with the same lists keeps its record of connections; every other
// recorded connection is returned, to be closed: its user was withdrawn,
// or its lists changed and it must connect again to get the new ones. A
// user new or changed is checked first; one that fails is the error, and
// nothing is returned. Called with mu held, or before the gate is shared.
func (g *gate) table(users []User) (map[string]*admitted, []uint64, error) {
	next := make(map[string]*admitted, len(users))
	for _, u := range users {
		if next[u.NKey] != nil {
			return nil, nil, fmt.Errorf("bus user %s: given twice (one nkey is one user, with one set of lists)", u.NKey)
		}
		old := g.users[u.NKey]
		if old != nil && same(old.u, u) {
			next[u.NKey] = old
			continue
		}
		if err := u.check(); err != nil {
			return nil, nil, err
		}
		next[u.NKey] = &admitted{u: u, perms: &server.User{Username: u.NKey, Account: g.accountOf(u), Permissions: permissions(u)}, conns: map[uint64]struct{}{}}
	}
	var drop []uint64
	for key, old := range g.users {
		if next[key] == old {
			continue
		}
		for id := range old.conns {
			drop = append(drop, id)
		}
	}
	return next, drop, nil
}

// swap puts users in force and returns the connections to close, and the
// server that holds them (nil before it starts: none to close). A user it
// cannot admit is an error, and changes nothing.
func (g *gate) swap(users []User) ([]uint64, *server.Server, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	next, drop, err := g.table(users)
	if err != nil {
		return nil, nil, err
	}
	g.users = next
	return drop, g.ns, nil
}

// add puts u in force beside the users in force, replacing the user of the
// same nkey, and returns the connections to close (those of the user it
// replaced, when its lists changed) and the server that holds them. It
// costs what one user costs, not what every user does. A user it cannot
// admit is an error, and changes nothing.
func (g *gate) add(u User) ([]uint64, *server.Server, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.users[u.NKey]
	if old != nil && same(old.u, u) {
		return nil, g.ns, nil
	}
	if err := u.check(); err != nil {
		return nil, nil, err
	}
	if g.users == nil {
		g.users = map[string]*admitted{}
	}
	g.users[u.NKey] = &admitted{u: u, perms: &server.User{Username: u.NKey, Account: g.accountOf(u), Permissions: permissions(u)}, conns: map[uint64]struct{}{}}
	return old.recorded(), g.ns, nil
}

// withdraw takes the user nkey out of force and returns its connections
// to close, and the server that holds them. A user not in force is no
// error: nothing to do.
func (g *gate) withdraw(nkey string) ([]uint64, *server.Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.users[nkey]
	delete(g.users, nkey)
	return old.recorded(), g.ns
}

// stand puts u in force as a standing user, replacing the standing user
// of the same nkey, and returns the connections to close (those of the
// user it replaced, when its lists changed) and the server that holds
// them.
func (g *gate) stand(u User) ([]uint64, *server.Server, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.standing[u.NKey]
	if old != nil && same(old.u, u) {
		return nil, g.ns, nil
	}
	if err := u.check(); err != nil {
		return nil, nil, err
	}
	if g.standing == nil {
		g.standing = map[string]*admitted{}
	}
	g.standing[u.NKey] = &admitted{u: u, perms: &server.User{Username: u.NKey, Account: g.accountOf(u), Permissions: permissions(u)}, conns: map[uint64]struct{}{}}
	return old.recorded(), g.ns, nil
}

// sitDown takes the standing user nkey out of force and returns its
// connections to close.
func (g *gate) sitDown(nkey string) ([]uint64, *server.Server) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.standing[nkey]
	delete(g.standing, nkey)
	return old.recorded(), g.ns
}

// recorded are the connections a holds on record; none for no user.
func (a *admitted) recorded() []uint64 {
	if a == nil {
		return nil
	}
	ids := make([]uint64, 0, len(a.conns))
	for id := range a.conns {
		ids = append(ids, id)
	}
	return ids
}

// list is the users in force, by nkey.
func (g *gate) list() []User {
	g.mu.Lock()
	defer g.mu.Unlock()
	users := make([]User, 0, len(g.users))
	for _, a := range g.users {
		users = append(users, a.u)
	}
	slices.SortFunc(users, func(a, b User) int { return strings.Compare(a.NKey, b.NKey) })
	return users
}

func same(a, b User) bool {
	return a.Full == b.Full && a.System == b.System && slices.Equal(a.Publish, b.Publish) && slices.Equal(a.Subscribe, b.Subscribe)
}

// permissions are what u may do in the mesh account: nil (anything) for a
// full user, else exactly its lists. An empty list allows nothing: an
// empty allow list would read as "allow all" to nats-server, so it is a
// deny of every subject instead.
// accountOf is the account u's connections are in: the system account
// for a System user, the mesh's for any other.
func (g *gate) accountOf(u User) *server.Account {
	if u.System {
		return g.sys
	}
	return g.acc
}

func permissions(u User) *server.Permissions {
	if u.Full || u.System {
		return nil
	}
	return &server.Permissions{Publish: subjects(u.Publish), Subscribe: subjects(u.Subscribe)}
}

func subjects(allow []string) *server.SubjectPermission {
	if len(allow) == 0 {
		return &server.SubjectPermission{Deny: []string{">"}}
	}
	return &server.SubjectPermission{Allow: slices.Clone(allow)}
}

// Check admits a client that signed the server's nonce with the seed of a
// user in force, and gives it that user's account and permissions. Anything
// else is refused, which the client reads as an authorization violation.
func (g *gate) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	opts := c.GetOpts()
	if !signed(opts.Nkey, opts.Sig, c.GetNonce()) {
		return false
	}
	id := c.GetID()
	g.mu.Lock()
	a := g.users[opts.Nkey]
	if a == nil {
		a = g.standing[opts.Nkey]
	}
	if a == nil || g.acc == nil {
		g.mu.Unlock()
		return false
	}
	// Recorded under the same lock as the lookup, so a swap either sees
	// this connection to close it or is seen by it.
	a.conns[id] = struct{}{}
	var recorded []uint64
	if len(a.conns) > pruneAt {
		for cid := range a.conns {
			recorded = append(recorded, cid)
		}
	}
	perms := a.perms
	g.mu.Unlock()
	c.RegisterUser(perms)
	g.prune(a, recorded)
	return true
}

// prune forgets the recorded connections of a that have closed. A closed
// connection's ID is never given again, so forgetting it late is safe.
func (g *gate) prune(a *admitted, recorded []uint64) {
	var gone []uint64
	for _, id := range recorded {
		if g.ns.GetClient(id) == nil {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		return
	}
	g.mu.Lock()
	for _, id := range gone {
		delete(a.conns, id)
	}
	g.mu.Unlock()
}

// signed says whether sig (base64, raw URL or standard, as nats-server's own
// nkey check takes it) is nonce signed by the seed of the user nkey key.
func signed(key, sig string, nonce []byte) bool {
	if key == "" || sig == "" || len(nonce) == 0 {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		if raw, err = base64.StdEncoding.DecodeString(sig); err != nil {
			return false
		}
	}
	pub, err := nkeys.FromPublicKey(key)
	if err != nil {
		return false
	}
	return pub.Verify(nonce, raw) == nil
}
