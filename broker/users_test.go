package broker_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-fleet/mesh/broker"
	"github.com/mesh-fleet/mesh/internal/poll"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// conns counts the bus's open connections of the user nkey, as the server
// holds them.
func (b *bus) conns(t testing.TB, nkey string) int {
	t.Helper()
	c, err := b.srv.NATS().Connz(&server.ConnzOptions{User: nkey, Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return len(c.Conns)
}

// reconnecting are the options of a client that reconnects at once and
// keeps trying after refusals, as a host does.
func reconnecting(errs chan<- error) []nats.Option {
	return []nats.Option{
		nats.ReconnectWait(20 * time.Millisecond),
		nats.MaxReconnects(-1),
		nats.IgnoreAuthErrorAbort(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}),
	}
}

// TestWithdrawnUserIsClosedAndRefused: SetUsers without a user returns only
// once the bus has closed that user's connection, and the bus refuses it at
// reconnect with an authorization violation (which the host reads as its
// removal). The users that stay keep their connections.
func TestWithdrawnUserIsClosedAndRefused(t *testing.T) {
	t.Parallel()
	ctl, ctlPub := newUser(t)
	node, nodePub := newUser(t)
	stays, staysPub := newUser(t)
	b := startBus(t, []broker.User{
		{NKey: ctlPub, Full: true},
		{NKey: nodePub, Publish: []string{"n.>"}},
		{NKey: staysPub, Publish: []string{"s.>"}},
	})
	ctlc, err := b.connect(t, ctl)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := b.connect(t, node, reconnecting(make(chan error, 8))...)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := b.connect(t, stays)
	if err != nil {
		t.Fatal(err)
	}
	if n := b.conns(t, nodePub); n != 1 {
		t.Fatalf("the node holds %d connections before, want 1", n)
	}

	if err := b.srv.SetUsers([]broker.User{{NKey: ctlPub, Full: true}, {NKey: staysPub, Publish: []string{"s.>"}}}); err != nil {
		t.Fatal(err)
	}
	if n := b.conns(t, nodePub); n != 0 {
		t.Fatalf("SetUsers returned with %d connections of the withdrawn user open", n)
	}
	poll.Until(t, 10*time.Second, "the withdrawn user refused at reconnect", func() error {
		err := nc.LastError()
		if !nc.IsConnected() && errors.Is(err, nats.ErrAuthorization) {
			return nil
		}
		return fmt.Errorf("connected %v, last error %v", nc.IsConnected(), err)
	})
	if _, err := b.connect(t, node); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a new connection of the withdrawn user: %v, want an authorization violation", err)
	}

	// The user that stayed kept its one connection and still publishes.
	if n := b.conns(t, staysPub); n != 1 || kept.Stats().Reconnects != 0 {
		t.Fatalf("the user that stayed holds %d connections after %d reconnects, want 1 after 0", n, kept.Stats().Reconnects)
	}
	sub, err := ctlc.SubscribeSync("s.x")
	if err != nil {
		t.Fatal(err)
	}
	ctlc.Flush()
	if err := kept.Publish("s.x", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("the user that stayed cannot publish: %v", err)
	}
}

// TestChangedListsReconnect: a user whose lists change has its connection
// closed by SetUsers and, reconnecting, holds the new lists: the subject
// allowed before is a permissions violation, the one allowed now goes
// through.
func TestChangedListsReconnect(t *testing.T) {
	t.Parallel()
	ctl, ctlPub := newUser(t)
	node, nodePub := newUser(t)
	b := startBus(t, []broker.User{{NKey: ctlPub, Full: true}, {NKey: nodePub, Publish: []string{"old.>"}}})
	ctlc, err := b.connect(t, ctl)
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	nc, err := b.connect(t, node, reconnecting(errs)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.srv.SetUsers([]broker.User{{NKey: ctlPub, Full: true}, {NKey: nodePub, Publish: []string{"new.>"}}}); err != nil {
		t.Fatal(err)
	}
	if n := b.conns(t, nodePub); n > 1 {
		t.Fatalf("%d connections of the user after SetUsers: the old one was not closed", n)
	}
	poll.Until(t, 10*time.Second, "the user connected again", func() error {
		if nc.IsConnected() && nc.Stats().Reconnects == 1 {
			return nil
		}
		return fmt.Errorf("connected %v after %d reconnects", nc.IsConnected(), nc.Stats().Reconnects)
	})

	sub, err := ctlc.SubscribeSync("new.x")
	if err != nil {
		t.Fatal(err)
	}
	ctlc.Flush()
	if err := nc.Publish("new.x", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("a subject the new lists allow is not delivered: %v", err)
	}
	for len(errs) > 0 {
		<-errs
	}
	if err := nc.Publish("old.x", []byte("no")); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Fatalf("want a permission violation, got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("publishing to the subject the old lists allowed raised no permission violation")
	}
}

// TestRefusedAtConnect: the bus requires every client to prove it holds the
// seed of a user in force; each of these is refused with an authorization
// violation.
func TestRefusedAtConnect(t *testing.T) {
	t.Parallel()
	known, knownPub := newUser(t)
	other, _ := newUser(t)
	stranger, _ := newUser(t)
	b := startBus(t, []broker.User{{NKey: knownPub, Publish: []string{"x"}}})
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"no credential", nil},
		{"a known public key signed with another seed", []nats.Option{nats.Nkey(knownPub, other.Sign)}},
		{"a known public key and a signature that is not base64", []nats.Option{nats.Nkey(knownPub, func([]byte) ([]byte, error) { return []byte("!"), nil })}},
		{"a known public key and no signature", []nats.Option{nats.Nkey(knownPub, func([]byte) ([]byte, error) { return nil, nil })}},
		{"a user the bus does not know", []nats.Option{nats.Nkey(mustPub(t, stranger), stranger.Sign)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]nats.Option{
				nats.Secure(b.tls()),
				nats.TLSHandshakeFirst(),
				nats.NoReconnect(),
			}, tc.opts...)
			nc, err := nats.Connect("nats://"+b.srv.Addr(), opts...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("refused with %v, want an authorization violation", err)
			}
		})
	}
	if _, err := b.connect(t, known); err != nil {
		t.Fatalf("the known user with its own seed: %v", err)
	}
}

// TestEmptyListsAllowNothing: a user with no subjects may connect and do
// nothing: nats-server reads an empty allow list as "allow all".
func TestEmptyListsAllowNothing(t *testing.T) {
	t.Parallel()
	_, ctlPub := newUser(t)
	node, nodePub := newUser(t)
	b := startBus(t, []broker.User{{NKey: ctlPub, Full: true}, {NKey: nodePub}})
	errs := make(chan error, 8)
	nc, err := b.connect(t, node, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish("any.x", []byte("no")); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.SubscribeSync("any.>"); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	var got []string
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Fatalf("want a permission violation, got %v", err)
			}
			got = append(got, err.Error())
		case <-time.After(5 * time.Second):
			t.Fatalf("a user with no subjects raised %d permission violations, want 2 (publish, subscribe): %q", len(got), got)
		}
	}
	if !strings.Contains(strings.Join(got, " "), "Publish") || !strings.Contains(strings.Join(got, " "), "Subscription") {
		t.Fatalf("violations %q, want one for the publish and one for the subscription", got)
	}
}

func mustPub(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

// TestReconnectsAreForgotten: a user that connects again and again (a host
// on a flaky link) keeps a bounded record of connections, and withdrawing
// it still closes the one that is open.
func TestReconnectsAreForgotten(t *testing.T) {
	t.Parallel()
	node, nodePub := newUser(t)
	b := startBus(t, []broker.User{{NKey: nodePub, Subscribe: []string{"x"}}})
	for range 5 * broker.PruneAt {
		nc, err := b.connect(t, node)
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	poll.Until(t, 10*time.Second, "the closed connections gone from the server", func() error {
		n := b.conns(t, nodePub)
		if n == 0 {
			return nil
		}
		return fmt.Errorf("%d open", n)
	})
	if _, err := b.connect(t, node, reconnecting(make(chan error, 8))...); err != nil {
		t.Fatal(err)
	}
	if n := b.srv.Recorded(nodePub); n > broker.PruneAt+1 {
		t.Fatalf("%d connections on record after %d made, want at most %d", n, 5*broker.PruneAt+1, broker.PruneAt+1)
	}
	if err := b.srv.SetUsers(nil); err != nil {
		t.Fatal(err)
	}
	if n := b.conns(t, nodePub); n != 0 {
		t.Fatalf("SetUsers returned with %d connections of the withdrawn user open", n)
	}
}

// TestBadUserChangesNothing: SetUsers given a user it cannot admit says
// which and what is wrong, and the users in force stay.
func TestBadUserChangesNothing(t *testing.T) {
	t.Parallel()
	node, nodePub := newUser(t)
	b := startBus(t, []broker.User{{NKey: nodePub, Subscribe: []string{"x"}}})
	nc, err := b.connect(t, node, reconnecting(make(chan error, 8))...)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPub := newUser(t)
	for _, tc := range []struct {
		user broker.User
		want string
	}{
		{broker.User{NKey: otherPub, Publish: []string{"a..b"}}, `subject "a..b" is not a valid subject`},
		{broker.User{NKey: otherPub, Subscribe: []string{""}}, `subject "" is not a valid subject`},
		{broker.User{NKey: "N" + otherPub[1:]}, "not a user nkey"},
		{broker.User{NKey: nodePub, Subscribe: []string{"y"}}, "given twice"},
	} {
		err := b.srv.SetUsers([]broker.User{{NKey: nodePub, Subscribe: []string{"x"}}, tc.user})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("SetUsers(%+v): %v, want an error saying %q", tc.user, err, tc.want)
		}
	}
	if got := b.srv.Users(); len(got) != 1 || got[0].NKey != nodePub {
		t.Fatalf("users after refusals: %+v, want the one in force before", got)
	}
	if n := b.conns(t, nodePub); n != 1 || nc.Stats().Reconnects != 0 {
		t.Fatalf("the user in force holds %d connections after %d reconnects, want 1 after 0", n, nc.Stats().Reconnects)
	}
}

// TestWithdrawalRacesConnects: clients of a user connect again and again
// while SetUsers admits and withdraws it. Once a withdrawal has returned, a
// connection begun after it is refused, and every connection admitted
// before it is closed: none outlives the withdrawal.
func TestWithdrawalRacesConnects(t *testing.T) {
	t.Parallel()
	node, nodePub := newUser(t)
	user := broker.User{NKey: nodePub, Subscribe: []string{"x"}}
	b := startBus(t, nil)
	for round := range 10 {
		if err := b.srv.SetUsers([]broker.User{user}); err != nil {
			t.Fatal(err)
		}
		var withdrawn atomic.Bool
		var tried atomic.Int64 // connections begun after the withdrawal
		stop := make(chan struct{})
		admitted := make(chan *nats.Conn, 1024)
		late := make(chan error, 1)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					after := withdrawn.Load()
					nc, err := nats.Connect("nats://"+b.srv.Addr(), nats.Nkey(nodePub, node.Sign), nats.Secure(b.tls()), nats.TLSHandshakeFirst(), nats.NoReconnect())
					if after {
						tried.Add(1)
					}
					if err != nil {
						continue
					}
					if after {
						select {
						case late <- fmt.Errorf("round %d: a connection begun after the withdrawal was admitted", round):
						default:
						}
					}
					select {
					case admitted <- nc:
					default:
						nc.Close()
					}
				}
			}()
		}
		poll.Until(t, 10*time.Second, "a connection admitted", func() error {
			if len(admitted) > 0 {
				return nil
			}
			return errors.New("none yet")
		})
		if err := b.srv.SetUsers(nil); err != nil {
			t.Fatal(err)
		}
		withdrawn.Store(true)
		poll.Until(t, 10*time.Second, "connections tried after the withdrawal", func() error {
			if tried.Load() >= 8 {
				return nil
			}
			return fmt.Errorf("%d tried", tried.Load())
		})
		close(stop)
		wg.Wait()
		close(admitted)
		select {
		case err := <-late:
			t.Fatal(err)
		default:
		}
		for nc := range admitted {
			poll.Until(t, 10*time.Second, "an admitted connection closed by the withdrawal", func() error {
				if !nc.IsConnected() {
					return nil
				}
				return fmt.Errorf("round %d: status %v", round, nc.Status())
			})
			nc.Close()
		}
		poll.Until(t, 10*time.Second, "no connection of the withdrawn user", func() error {
			n := b.conns(t, nodePub)
			if n == 0 {
				return nil
			}
			return fmt.Errorf("round %d: %d open", round, n)
		})
	}
}

// TestOneUserChangeEqualsRecomposition: AddUser and WithdrawUser, each
// changing one user, leave the bus with the users SetUsers would put in
// force given every user composed anew (a second bus, given the whole list
// at each step, holds the same), and they act on connections as SetUsers
// does: a user added again with the same lists keeps its connection, one
// whose lists change is closed and reconnects with the new ones, one
// withdrawn is closed and refused, a bad user changes nothing.
func TestOneUserChangeEqualsRecomposition(t *testing.T) {
	t.Parallel()
	_, ctlPub := newUser(t)
	node, nodePub := newUser(t)
	_, otherPub := newUser(t)
	_, tokenPub := newUser(t)
	first := []broker.User{{NKey: ctlPub, Full: true}, {NKey: nodePub, Publish: []string{"n.>"}}}
	inc, full := startBus(t, first), startBus(t, first)
	nc, err := inc.connect(t, node, reconnecting(make(chan error, 8))...)
	if err != nil {
		t.Fatal(err)
	}
	model := map[string]broker.User{}
	for _, u := range first {
		model[u.NKey] = u
	}
	for _, step := range []struct {
		name     string
		add      *broker.User
		withdraw string
		bad      string // the error AddUser gives, when the user is bad
		// the node's connection afterwards: reconnects, and open
		reconnects uint64
		connected  bool
	}{
		{name: "a user more", add: &broker.User{NKey: otherPub, Subscribe: []string{"o"}}, connected: true},
		{name: "an enrolment user", add: &broker.User{NKey: tokenPub, Publish: []string{"mesh.enrol"}, Subscribe: []string{"_INBOX.t.>"}}, connected: true},
		{name: "the node again, the same lists", add: &broker.User{NKey: nodePub, Publish: []string{"n.>"}}, connected: true},
		{name: "a bad user", add: &broker.User{NKey: otherPub, Publish: []string{"a..b"}}, bad: `subject "a..b" is not a valid subject`, connected: true},
		{name: "not a user key", add: &broker.User{NKey: "N" + otherPub[1:]}, bad: "not a user nkey", connected: true},
		{name: "the enrolment user withdrawn", withdraw: tokenPub, connected: true},
		{name: "withdrawn again", withdraw: tokenPub, connected: true},
		{name: "the node's lists changed", add: &broker.User{NKey: nodePub, Publish: []string{"m.>"}}, reconnects: 1, connected: true},
		{name: "the node withdrawn", withdraw: nodePub, reconnects: 1},
	} {
		if step.add != nil {
			err := inc.srv.AddUser(*step.add)
			if step.bad != "" {
				if err == nil || !strings.Contains(err.Error(), step.bad) {
					t.Fatalf("%s: AddUser: %v, want an error saying %q", step.name, err, step.bad)
				}
			} else if err != nil {
				t.Fatalf("%s: AddUser: %v", step.name, err)
			} else {
				model[step.add.NKey] = *step.add
			}
		} else {
			inc.srv.WithdrawUser(step.withdraw)
			delete(model, step.withdraw)
			if n := inc.conns(t, step.withdraw); n != 0 {
				t.Fatalf("%s: WithdrawUser returned with %d connections of the user open", step.name, n)
			}
		}
		var all []broker.User
		for _, u := range model {
			all = append(all, u)
		}
		if err := full.srv.SetUsers(all); err != nil {
			t.Fatal(err)
		}
		if got, want := inc.srv.Users(), full.srv.Users(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: one user changed gives users\n%+v\nwhere composing all gives\n%+v", step.name, got, want)
		}
		poll.Until(t, 10*time.Second, step.name+": the node's connection as SetUsers leaves it", func() error {
			// A client whose user was withdrawn keeps trying
			// (IgnoreAuthErrorAbort), and nats.go counts each try whose
			// socket connects as a reconnect before the bus refuses it:
			// past the kick, the count only says it was kicked.
			r := nc.Stats().Reconnects
			counted := r == step.reconnects || !step.connected && r >= step.reconnects
			if counted && nc.IsConnected() == step.connected {
				return nil
			}
			return fmt.Errorf("connected %v after %d reconnects, want %v after %d", nc.IsConnected(), r, step.connected, step.reconnects)
		})
	}
	if _, err := inc.connect(t, node); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a new connection of the withdrawn node: %v, want an authorization violation", err)
	}
}

// TestSystemUserIsInTheSystemAccount: a System user's connection is in
// the bus's system account, where the servers answer their own requests
// ($SYS.REQ.SERVER.PING); a full user of the mesh's account gets no
// answer there.
func TestSystemUserIsInTheSystemAccount(t *testing.T) {
	t.Parallel()
	sys, sysPub := newUser(t)
	ctl, ctlPub := newUser(t)
	b := startBus(t, []broker.User{{NKey: sysPub, System: true}, {NKey: ctlPub, Full: true}})
	for _, tc := range []struct {
		name    string
		kp      nkeys.KeyPair
		answers bool
	}{{"system", sys, true}, {"full", ctl, false}} {
		nc, err := b.connect(t, tc.kp)
		if err != nil {
			t.Fatal(err)
		}
		_, err = nc.Request("$SYS.REQ.SERVER.PING", nil, 5*time.Second)
		if answered := err == nil; answered != tc.answers {
			t.Errorf("the %s user's server ping: %v; want answered %t", tc.name, err, tc.answers)
		}
	}
}
